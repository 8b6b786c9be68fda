package stores

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash/fnv"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
)

// TruncatedPayload is how much of a payload a truncated dead letter keeps.
const TruncatedPayload = 1024

// Validate reports a record that no store can hold, as ErrInvalid with the
// reason. Backends call it on every appended record.
func (r *Record) Validate() error {
	switch {
	case r.Session == "":
		return fmt.Errorf("%w: empty session", ErrInvalid)
	case r.Route == "":
		return fmt.Errorf("%w: empty route", ErrInvalid)
	case r.Envelope.ID == "":
		return fmt.Errorf("%w: empty envelope ID", ErrInvalid)
	case r.Partition < 0:
		return fmt.Errorf("%w: negative partition", ErrInvalid)
	case r.State == Dead && r.DeadReason == "":
		return fmt.Errorf("%w: dead letter %s without a reason", ErrInvalid, r.Envelope.ID)
	case r.State != "" && r.State != Live && r.State != Dead:
		return fmt.Errorf("%w: state %q", ErrInvalid, r.State)
	}
	return nil
}

// Validate reports a batch that no store can apply, as ErrInvalid.
func (b *Batch) Validate() error {
	for i := range b.Append {
		if err := b.Append[i].Validate(); err != nil {
			return err
		}
	}
	for _, s := range b.Settle {
		switch {
		case s.Session == "" || s.Route == "" || s.ID == "":
			return fmt.Errorf("%w: settlement of an incomplete key %+v", ErrInvalid, s.Key)
		case s.Outcome < Done || s.Outcome > Drop:
			return fmt.Errorf("%w: settlement outcome %d", ErrInvalid, s.Outcome)
		case s.Outcome != Drop && s.Token == 0:
			return fmt.Errorf("%w: settlement of %s without a token", ErrInvalid, s.ID)
		case s.Outcome == DeadLetter && s.Reason == "":
			return fmt.Errorf("%w: dead letter %s without a reason", ErrInvalid, s.ID)
		}
	}
	return nil
}

// Validate reports a claim request no store can serve, as ErrInvalid.
func (req *ClaimRequest) Validate() error {
	if req.Session == "" || req.Partition < 0 || req.Limit < 1 || req.Token == 0 {
		return fmt.Errorf("%w: claim of session %q, partition %d, limit %d, token %d",
			ErrInvalid, req.Session, req.Partition, req.Limit, req.Token)
	}
	return nil
}

// PartitionOf maps a key (the ordering key, else the coalesce key, else the
// envelope ID) to one of partitions partitions by FNV-1a (32-bit) of the key, modulo
// partitions. It returns 0 when partitions <= 1.
func PartitionOf(key string, partitions int) int {
	if partitions <= 1 {
		return 0
	}
	h := fnv.New32a()
	h.Write([]byte(key))
	return int(h.Sum32() % uint32(partitions))
}

// PartitionLease is the name of the lease that makes one owner drain a
// session partition. Its current token is the only one under which the
// partition's records may be claimed.
func PartitionLease(session string, partition int) string {
	return "outbox/" + session + "/" + strconv.Itoa(partition)
}

// Truncate returns the dead letter that stands in for r when r cannot be
// kept whole (a payload over max_payload_bytes, a record the store refused):
// the first TruncatedPayload bytes of the payload, no headers and no keys
// (they may be what the store refused), and a reason that names the full
// size and SHA-256 of the payload. A truncated dead letter cannot be
// requeued.
func Truncate(r Record, reason string, now time.Time) Record {
	p, n := r.Envelope.Payload, min(len(r.Envelope.Payload), TruncatedPayload)
	sum := sha256.Sum256(p)
	r.DeadReason = fmt.Sprintf("%s (payload %d bytes, sha256 %s; first %d bytes kept)",
		reason, len(p), hex.EncodeToString(sum[:]), n)
	r.Envelope.Payload, r.Envelope.Headers, r.Envelope.Key = p[:n:n], nil, ""
	r.CoalesceKey, r.Truncated, r.State, r.Token = "", true, Dead, 0
	r.DeadAt = cmp.Or(r.DeadAt, now)
	return r
}

// requeueSpace names the envelope IDs of requeued dead letters (UUIDv5).
var requeueSpace = uuid.MustParse("6f1b7f4e-4f3a-4c1e-9d8e-2b1f0c6a5e11")

// Requeued returns the live record that requeueing dead letter d makes, to
// be appended (with a Drop of d) in one Write: a new envelope ID derived
// from d's ID and death, so that requeueing the same dead letter twice
// appends it once; CausationID d's ID; the given session and partition
// count (the route's current ones); attempts and claim cleared; created at
// now with the same time left to live; no coalesce key. Truncated dead
// letters cannot be requeued (ErrInvalid).
func Requeued(d Record, session string, partitions int, now time.Time) (Record, error) {
	if d.State != Dead {
		return Record{}, fmt.Errorf("%w: %s is not a dead letter", ErrInvalid, d.Envelope.ID)
	}
	if d.Truncated {
		return Record{}, fmt.Errorf("%w: %s was truncated (%s): only its first %d payload bytes were kept, so it cannot be delivered",
			ErrInvalid, d.Envelope.ID, d.DeadReason, TruncatedPayload)
	}
	env := d.Envelope
	env.ID = uuid.NewSHA1(requeueSpace, []byte(d.Envelope.ID+"|"+strconv.FormatInt(d.DeadAt.UnixNano(), 10))).String()
	r := Record{Session: session, Partition: PartitionOf(cmp.Or(env.Key, env.ID), partitions), Route: d.Route,
		Envelope: env, CausationID: d.Envelope.ID, Raw: d.Raw, State: Live, CreatedAt: now}
	if !d.ExpiresAt.IsZero() {
		r.ExpiresAt = d.ExpiresAt.Add(now.Sub(d.CreatedAt))
	}
	return r, nil
}

// Supersedes reports whether newer replaces older under coalescing at now:
// older was received no later than newer (an older message never replaces a
// newer one), or after now: its receive time is from a wall clock that was
// set back since, and says nothing about which came first.
func Supersedes(newer, older *Record, now time.Time) bool {
	o := older.Envelope.ReceivedAt
	return !o.After(newer.Envelope.ReceivedAt) || o.After(now)
}

// Stamp sets what Write stamps on a record it inserts at now, but Seq:
// CreatedAt when zero, and the State Live, or for a dead letter DeadAt when
// zero and Token 0.
func (r *Record) Stamp(now time.Time) {
	r.CreatedAt = cmp.Or(r.CreatedAt, now)
	if r.State == Dead {
		r.Token, r.DeadAt = 0, cmp.Or(r.DeadAt, now)
	} else {
		r.State = Live
	}
}

// PageSize is the number of dead letters a page of q holds.
func (q *DeadQuery) PageSize() int { return cmp.Or(max(q.Limit, 0), 100) }

// Page is what Dead returns for q given found, the matching dead letters
// in list order from the cursor on (at least PageSize+1 of them when there
// are more): the page (without payloads for q.NoPayload), the cursor of the
// next one, ErrNotFound for a query by ID that found none.
func (q *DeadQuery) Page(found []Record) ([]Record, string, error) {
	for i := 0; q.NoPayload && i < len(found); i++ {
		found[i] = WithoutPayload(found[i])
	}
	switch limit := q.PageSize(); {
	case q.ID != "" && len(found) == 0:
		return nil, "", ErrNotFound
	case len(found) > limit:
		return found[:limit], DeadCursor(&found[limit-1]), nil
	}
	return found, "", nil
}

// DeadCursor is the position of dead letter r in list order (DeadAt, then
// Seq), as DeadQuery.After takes it.
func DeadCursor(r *Record) string {
	var at int64
	if !r.DeadAt.IsZero() {
		at = r.DeadAt.UnixNano()
	}
	return strconv.FormatInt(at, 10) + "." + strconv.FormatInt(r.Seq, 10)
}

// ParseDeadCursor reads a DeadCursor back: DeadAt in Unix nanoseconds and
// Seq. A malformed cursor is ErrInvalid; an empty one is before every dead
// letter.
func ParseDeadCursor(c string) (deadAt, seq int64, err error) {
	if c == "" {
		return math.MinInt64, 0, nil
	}
	a, b, _ := strings.Cut(c, ".")
	deadAt, errAt := strconv.ParseInt(a, 10, 64)
	seq, errSeq := strconv.ParseInt(b, 10, 64)
	if errAt != nil || errSeq != nil {
		return 0, 0, fmt.Errorf("%w: bad cursor %q", ErrInvalid, c)
	}
	return deadAt, seq, nil
}
