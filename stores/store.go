// Package stores defines the contracts of gobridge's durable state: the
// outbox, where shared_outbox routes persist envelopes until a drainer has
// delivered them, and the lease store, which keeps one drainer per session
// partition across goroutines and instances.
//
// Backends live in subpackages (memory, sqlite, dynamodb); each passes the
// conformance suites in storetest.
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
	// ErrStaleToken: a state change named a fencing token that no longer
	// owns the record (its claim was taken over, or it was never claimed).
	ErrStaleToken = errors.New("stores: stale fencing token")
	// ErrNotFound: no such record (or no such dead letter).
	ErrNotFound = errors.New("stores: record not found")
	// ErrLeaseHeld: the lease is held by another owner and has not lapsed.
	ErrLeaseHeld = errors.New("stores: lease held by another owner")
	// ErrLeaseLost: a renew or release by an owner that no longer holds the
	// lease (it lapsed and was taken, or it was released).
	ErrLeaseLost = errors.New("stores: lease lost")
	// ErrInvalid: a record or request is malformed (an empty Session,
	// Route or Envelope.ID, a negative Partition, a Limit < 1). Nothing was
	// changed.
	ErrInvalid = errors.New("stores: invalid record or request")
	// ErrFull: the backend is out of space (disk full, size cap reached).
	// Nothing of the failed call was persisted; ingest should push back.
	ErrFull = errors.New("stores: store full")
)

// State is where a record is in its life.
type State string

const (
	// Pending records wait to be claimed once NextAttemptAt has passed.
	Pending State = "pending"
	// Claimed records are owned by one drainer until ClaimUntil.
	Claimed State = "claimed"
	// Done records were delivered (or settled by drop); they are compacted.
	Done State = "done"
	// Dead records were dead-lettered; they stay until requeued or dropped.
	Dead State = "dead"
)

// Record is one envelope in the outbox with its delivery bookkeeping.
// Records are unique per (Session, Route, Envelope.ID).
type Record struct {
	Session   string
	Partition int
	Route     string
	Envelope  message.Envelope
	// CoalesceKey, when set, makes Append replace a pending, unclaimed
	// record of the same Route and CoalesceKey whose envelope was received
	// earlier (never a newer one).
	CoalesceKey string
	// CausationID is the envelope ID of the dead letter this record was
	// requeued from; empty otherwise.
	CausationID string

	State State
	// Seq is the persist order, assigned by Append, increasing per store.
	Seq int64
	// Attempts counts claims.
	Attempts int
	// FirstAttemptAt is stamped by the first claim; zero before it.
	FirstAttemptAt time.Time
	// NextAttemptAt hides a pending record until then.
	NextAttemptAt time.Time
	LastError     string
	CreatedAt     time.Time
	// ExpiresAt is zero when the record never expires.
	ExpiresAt time.Time
	// Token and ClaimUntil describe the current (or last) claim.
	Token      int64
	ClaimUntil time.Time
	// DeadAt and DeadReason are set when the record was dead-lettered.
	DeadAt     time.Time
	DeadReason string
}

// Key is the identity of a record.
type Key struct {
	Session string
	Route   string
	ID      string
}

// Key returns the identity of r.
func (r *Record) Key() Key { return Key{Session: r.Session, Route: r.Route, ID: r.Envelope.ID} }

// ClaimRequest asks for due records of one session partition.
type ClaimRequest struct {
	Session   string
	Partition int
	// Token is the claimer's fencing token (from its lease).
	Token int64
	// Limit is the most records returned.
	Limit int
	// Now is the claimer's clock: records due at or before it are claimed,
	// and claims that lapsed before it are taken over.
	Now time.Time
	// Until is the claim deadline stamped on each claimed record.
	Until time.Time
}

// Outbox is the durable queue behind shared_outbox routes.
//
// Claim returns records in persist order (Seq). With an ordering key
// (Envelope.Key non-empty), a record is not claimable while an older record
// of the same session and key is pending-but-not-due or claimed by a claim
// that has not lapsed, so records of one key are handed out in persist order.
//
// Complete, Release and DeadLetter name a record by its Key (Seq, when set
// as Claim returned it, is a fast path) and the token it was claimed with,
// and fail with ErrStaleToken when the record is now claimed under another
// token, is no longer claimed, or does not exist; a batch call changes
// nothing when any record in it is stale. Once a claim has lapsed its token
// may be rejected at any time, even before another claim takes the record.
//
// Coalescing (Record.CoalesceKey) replaces the newest (highest Seq) pending
// record of the same Session, Route and CoalesceKey: the new record takes a
// new Seq and the old one becomes done. When that record was received later
// than the new one (Envelope.ReceivedAt), the new one is absorbed as done
// instead. Claimed records are never replaced.
type Outbox interface {
	// Append persists records atomically (all or none) with one durable
	// commit. It is idempotent on (Session, Route, Envelope.ID): records
	// already present, in any state, are left as they are. It stamps
	// State=Pending, Seq and CreatedAt (when zero).
	Append(ctx context.Context, recs ...Record) error
	// Claim stamps up to req.Limit due records with req.Token and
	// req.Until, increments their Attempts, stamps FirstAttemptAt once,
	// and returns them.
	Claim(ctx context.Context, req ClaimRequest) ([]Record, error)
	// Complete marks delivered records done (compacting them).
	Complete(ctx context.Context, recs ...Record) error
	// Release returns a claimed record to pending, due at next, with the
	// error that made it fail.
	Release(ctx context.Context, rec Record, next time.Time, lastError string) error
	// DeadLetter moves a claimed record to the dead letters with a reason.
	// It stamps DeadAt from rec.DeadAt when that is set (pass the drainer's
	// clock there), else from the store's wall clock.
	DeadLetter(ctx context.Context, rec Record, reason string) error
	// Stats reports pending depth and the oldest pending record of a session.
	Stats(ctx context.Context, session string) (SessionStats, error)
	// Close releases the store's resources.
	Close() error
}

// SessionStats is a cheap summary of one session's backlog.
type SessionStats struct {
	// Pending counts records not yet done or dead (pending or claimed).
	Pending int
	// OldestCreatedAt is the CreatedAt of the oldest such record; zero when
	// there is none.
	OldestCreatedAt time.Time
}

// DeadFilter selects dead letters; results are oldest first (by DeadAt, then
// Seq).
type DeadFilter struct {
	// Route limits the list to one route; empty means all.
	Route string
	// After is the Cursor of the last record of the previous page.
	After string
	// Limit is the page size; <= 0 means 100.
	Limit int
}

// DeadLetters manages dead-lettered records. Each backend implements it
// alongside Outbox.
type DeadLetters interface {
	// ListDead returns one page of dead letters and the cursor of the next
	// page ("" when there is none).
	ListDead(ctx context.Context, f DeadFilter) ([]Record, string, error)
	// GetDead returns one dead letter by envelope ID (any session and
	// route; IDs are unique in practice). ErrNotFound when there is none.
	GetDead(ctx context.Context, id string) (Record, error)
	// Requeue puts a dead letter back to pending under a new envelope ID,
	// attempts reset, with CausationID set to the old ID, and returns the
	// new record. ErrNotFound when there is no such dead letter.
	Requeue(ctx context.Context, id string, now time.Time) (Record, error)
	// DropDead deletes a dead letter. ErrNotFound when there is none.
	DropDead(ctx context.Context, id string) error
	// AppendDead persists recs directly as dead letters, for failures that
	// happen before a record is ever claimed (a processor error, a
	// direct_hold permanent failure): atomically (all or none) with one
	// durable commit, like Append (DynamoDB: per call of at most its Append
	// limit). Every record must pass Validate and have a non-empty
	// DeadReason, else the call fails with ErrInvalid and writes nothing.
	// It is idempotent on (Session, Route, Envelope.ID): a record already
	// present, in any state, is left as it is (a batch mixing new and
	// existing keys writes only the new ones). It stamps State=Dead, Seq,
	// CreatedAt (when zero) and DeadAt (when zero: the store's wall clock),
	// and clears Token and ClaimUntil (no claim made it); Attempts,
	// LastError and the other fields are kept as given. Dead letters are
	// not live: they never count in Stats, and no Claim returns them.
	AppendDead(ctx context.Context, recs ...Record) error
}

// Store is what a backend provides: the outbox and its dead letters.
type Store interface {
	Outbox
	DeadLetters
}

// Lease is a named lease held by one owner until Until.
type Lease struct {
	Name  string
	Owner string
	// Token is the fencing token: larger than any token issued for this
	// name before, also across restarts of the store.
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
	// Release gives the lease up so another owner can take it at once.
	// ErrLeaseLost when l is no longer the current holding.
	Release(ctx context.Context, l Lease) error
	// List returns the leases whose name starts with prefix and that have
	// not lapsed at now.
	List(ctx context.Context, prefix string, now time.Time) ([]Lease, error)
	// Close releases the store's resources.
	Close() error
}

// PartitionOf maps a key (the ordering key, or the envelope ID when there is
// none) to one of partitions partitions by FNV-1a (32-bit) of the key, modulo
// partitions. It returns 0 when partitions <= 1.
func PartitionOf(key string, partitions int) int {
	if partitions <= 1 {
		return 0
	}
	const (
		offset32 = 2166136261
		prime32  = 16777619
	)
	h := uint32(offset32)
	for i := 0; i < len(key); i++ {
		h ^= uint32(key[i])
		h *= prime32
	}
	return int(h % uint32(partitions))
}
