// Package stores defines gobridge's durable state: the outbox, where
// shared_outbox (and direct_or_outbox) routes keep messages until a drainer
// has delivered them, its dead letters, and the leases that make one drainer
// own each session partition.
//
// One contract, Store, with backends in subpackages (memory, sqlite,
// dynamodb) that each pass the conformance suite in storetest. The rules
// every backend shares (validation, partitioning, requeue, truncation) are
// code in this package; backends only translate them into their storage.
//
// The store is the log and the recovery path of the engine that package
// drainer describes (DESIGN.md §4–5): an owner appends its records already
// claimed, and Claim serves what it does not hold in memory.
package stores

import (
	"context"
	"errors"
	"time"

	"github.com/gobridge/gobridge/message"
)

// Sentinel errors. Backends translate their own errors into these at their
// boundary; callers test them with errors.Is.
var (
	// ErrNotFound: no such dead letter.
	ErrNotFound = errors.New("stores: not found")
	// ErrLeaseHeld: the lease is held by another owner and has not lapsed.
	ErrLeaseHeld = errors.New("stores: lease held by another owner")
	// ErrLeaseLost: a renew or release by an owner that no longer holds the
	// lease, or a Claim under a token that is not the current token of the
	// partition's lease.
	ErrLeaseLost = errors.New("stores: lease lost")
	// ErrInvalid: the store cannot hold a record or serve a request (a
	// missing field, a dead letter without a reason, an item over the
	// backend's size limit). Nothing of the call was written.
	ErrInvalid = errors.New("stores: invalid record or request")
	// ErrFull: the backend is out of space (disk full). Nothing of the call
	// was written; ingest should push back.
	ErrFull = errors.New("stores: store full")
	// ErrClosed: a call on a store after its Close.
	ErrClosed = errors.New("stores: store closed")
)

// State is where a record is in its life. Delivered records leave the
// outbox: their key is remembered for a while (a tombstone) so that
// appending the same envelope again is a no-op, but no call returns them.
type State string

const (
	// Live records wait for delivery: unclaimed (Token 0) or claimed.
	Live State = "live"
	// Dead records were dead-lettered; they stay until requeued or dropped.
	Dead State = "dead"
)

// Record is one envelope in the outbox with its delivery bookkeeping.
// Records are unique per Key (Session, Route, Envelope.ID).
type Record struct {
	Session   string
	Partition int
	Route     string
	Envelope  message.Envelope
	// CoalesceKey, when set, makes Write replace the unclaimed live records
	// of the same Session, Route and CoalesceKey received earlier; when one
	// was received later, the new record is absorbed instead (Seq 0).
	// Claimed records are never replaced.
	CoalesceKey string
	// CausationID is the envelope ID of the dead letter this record was
	// requeued from; empty otherwise.
	CausationID string
	// Raw marks a record whose Envelope is the message as it arrived,
	// before the route's processors: an ingest dead letter and its
	// requeue. The drainer runs the route's processors before sending it.
	Raw bool
	// Truncated marks a dead letter whose payload was cut to its first
	// KiB (see Truncate); it cannot be requeued.
	Truncated bool

	// State, Seq and CreatedAt are stamped by Write. Seq is the persist
	// order: it increases with every record appended to a partition.
	State     State
	Seq       int64
	CreatedAt time.Time
	// Token is the fencing token of the claim holding the record; 0 when it
	// is unclaimed. A claim is valid only while its token is the current
	// token of the partition's lease.
	Token int64
	// Attempts counts sends of the record that failed transiently or
	// succeeded (capacity errors do not count); the drainer keeps it.
	Attempts int
	// FirstAttemptAt is when the record was first sent; zero before.
	FirstAttemptAt time.Time
	// NextAttemptAt is when the record may be sent again; zero: at once.
	NextAttemptAt time.Time
	LastError     string
	// ExpiresAt is zero when the record never expires.
	ExpiresAt time.Time
	// DeadAt and DeadReason are set on dead letters.
	DeadAt     time.Time
	DeadReason string
	// PayloadLen is the length of a payload that Dead left out
	// (DeadQuery.NoPayload); 0 otherwise. See PayloadBytes.
	PayloadLen int
}

// Key is the identity of a record.
type Key struct {
	Session string
	Route   string
	ID      string
}

// Key returns the identity of r.
func (r *Record) Key() Key { return Key{Session: r.Session, Route: r.Route, ID: r.Envelope.ID} }

// PayloadBytes is the length of r's payload, also when Dead left it out.
func (r *Record) PayloadBytes() int { return max(r.PayloadLen, len(r.Envelope.Payload)) }

// WithoutPayload returns r without its payload, its length in PayloadLen.
func WithoutPayload(r Record) Record {
	r.PayloadLen, r.Envelope.Payload = r.PayloadBytes(), nil
	return r
}

// Size is what r counts toward a session's byte limit: its payload, topic
// and headers.
func (r *Record) Size() int64 {
	n := len(r.Envelope.Payload) + len(r.Envelope.Topic)
	for k, v := range r.Envelope.Headers {
		n += len(k) + len(v)
	}
	return int64(n)
}

// Outcome is what a Settlement does to a record.
type Outcome int

const (
	// Done: the record was delivered (or dropped by policy). It leaves the
	// outbox; its key is remembered as a tombstone.
	Done Outcome = iota + 1
	// Retry: the record stays claimed; its Attempts, FirstAttemptAt,
	// NextAttemptAt and LastError are updated from the settlement.
	Retry
	// DeadLetter: the record becomes a dead letter with Reason; Attempts,
	// FirstAttemptAt and LastError are updated, DeadAt is set from At.
	DeadLetter
	// Drop: a dead letter is deleted (its key becomes a tombstone). Token
	// is ignored.
	Drop
)

// Settlement is the outcome of one claimed record (Done, Retry, DeadLetter), or
// the removal of a dead letter (Drop).
type Settlement struct {
	Key
	// Token is the claim being settled: the record must be live and
	// claimed under exactly this token (Done, Retry, DeadLetter).
	Token   int64
	Outcome Outcome
	// Attempts, FirstAttemptAt, NextAttemptAt: the record's bookkeeping
	// after the send (Retry, DeadLetter).
	Attempts       int
	FirstAttemptAt time.Time
	NextAttemptAt  time.Time
	// Reason is the last error (Retry) or the dead-letter reason
	// (DeadLetter).
	Reason string
	// At is when it happened (DeadAt for DeadLetter); zero: the store's clock.
	At time.Time
	// Stale is set by Write when the settlement was skipped because the
	// record is not in the state it names: not live under Token (Done,
	// Retry, DeadLetter) or not a dead letter (Drop), or gone.
	Stale bool
}

// Batch is one atomic write: Write commits all of it, or nothing. (A
// backend that cannot commit a large Batch at once, DynamoDB, may commit a
// part before it fails.) After a failed Write the stamps on its records and
// settlements mean nothing: the caller retries the same Batch, which
// reports what a failed attempt stored, or may have, as stored by it.
type Batch struct {
	// Settle is applied first, each settlement on its own: a stale one is
	// skipped (Stale set) and does not fail the batch.
	Settle []Settlement
	// Append adds records, in order. A record with State Dead is appended
	// as a dead letter (DeadReason required; DeadAt defaults to the store's
	// clock). Any other record is appended live: claimed under its Token
	// when Token is the current token of its partition's lease
	// (PartitionLease), else unclaimed, and then Write resets its Token to
	// 0 so that the caller knows it does not hold it.
	//
	// Write stamps State, Seq and CreatedAt (when zero) on each record it
	// inserted. A record whose Key is present in any state (live, dead, or
	// a tombstone) is skipped, as is one absorbed by coalescing: Write sets
	// its Seq and Token to 0 (the caller does not hold it).
	Append []Record
}

// ClaimRequest asks for the records of one session partition that its
// owner does not hold yet.
type ClaimRequest struct {
	Session   string
	Partition int
	// Token is the claimer's fencing token: it must be the current token of
	// the partition's lease (PartitionLease), else Claim fails with
	// ErrLeaseLost and claims nothing.
	Token int64
	// Limit is the most records returned.
	Limit int
	// After is a hint: the claimer holds every live record of the
	// partition with Seq <= After, so a backend whose Seqs follow commit
	// order may start there. Zero reads from the head.
	After int64
}

// DeadQuery selects dead letters, oldest first (by DeadAt, then Seq).
type DeadQuery struct {
	// ID selects the dead letters of one envelope ID (any session and
	// route); Route and After are then ignored.
	ID string
	// Route limits the list to one route; empty means all.
	Route string
	// After is the cursor of the last record of the previous page.
	After string
	// Limit is the page size; <= 0 means 100.
	Limit int
	// NoPayload leaves the payloads out, for listings: Dead then returns
	// each letter as WithoutPayload makes it, and a list (no ID) reads no
	// payload (a page of large payloads would fill the memory). Requeue
	// and drop read letters whole (FindDead).
	NoPayload bool
}

// SessionStats is one session's backlog and dead letters.
type SessionStats struct {
	Session string
	// Live counts live records; Bytes is their Size.
	Live  int
	Bytes int64
	// Oldest is the CreatedAt of the oldest live record; zero when none.
	Oldest time.Time
	// Partitions is one more than the highest Partition of a live record
	// (0 when none): a drainer of fewer partitions leaves some undelivered.
	Partitions int
	// Routes breaks the counts down by route (only routes with live
	// records or dead letters).
	Routes map[string]RouteCounts
}

// RouteCounts are one route's records in one session.
type RouteCounts struct {
	Live int
	Dead int
}

// Store is what a backend provides: the outbox, its dead letters and the
// leases that fence its partitions. Implementations are safe for concurrent
// use.
type Store interface {
	// Write commits b atomically (see Batch), durably when it returns if b
	// appends a record or drops a dead letter. Settlements of claimed
	// records alone may become durable only with a later commit: a power
	// loss (never a process crash) may undo them, and their records are
	// then sent again, which at-least-once delivery allows. It fails with
	// ErrInvalid when a record or settlement is malformed or a
	// record is too large for the backend, and with ErrFull when the
	// backend is out of space; nothing is written then.
	Write(ctx context.Context, b *Batch) error
	// Claim returns, in Seq order, up to req.Limit live records of the
	// partition that are not claimed under req.Token (unclaimed ones, and
	// those of void claims: an older token), and claims them under
	// req.Token. It ignores NextAttemptAt: the owner schedules retries.
	Claim(ctx context.Context, req ClaimRequest) ([]Record, error)
	// Dead returns one page of dead letters and the cursor of the next page
	// ("" when there is none). A query by ID that finds none returns
	// ErrNotFound.
	Dead(ctx context.Context, q DeadQuery) ([]Record, string, error)
	// Stats reports every session with live records or dead letters,
	// sorted by Session.
	Stats(ctx context.Context) ([]SessionStats, error)
	Leases
	// Close releases the store's resources.
	Close() error
}

// Lease is a named lease held by one owner until Until.
type Lease struct {
	Name  string
	Owner string
	// Token is the fencing token: larger than any token issued by this
	// store before, for any name, also across restarts.
	Token int64
	Until time.Time
}

// Leases hands out named leases with fencing tokens.
type Leases interface {
	// Acquire takes the lease for owner for ttl. It fails with ErrLeaseHeld
	// when another owner holds it and it has not lapsed at now. Acquiring a
	// lease one already holds renews it with a new, larger token.
	Acquire(ctx context.Context, name, owner string, ttl time.Duration, now time.Time) (Lease, error)
	// Renew extends a held lease, keeping its token. ErrLeaseLost when l is
	// no longer the current holding (another token, or released).
	Renew(ctx context.Context, l Lease, ttl time.Duration, now time.Time) (Lease, error)
	// Release gives the lease up so that another owner can take it at once.
	// No claim can be made under its token any more. ErrLeaseLost when l is
	// no longer current.
	Release(ctx context.Context, l Lease) error
	// List returns the leases whose name starts with prefix and that have
	// not lapsed at now.
	List(ctx context.Context, prefix string, now time.Time) ([]Lease, error)
}
