// Package memory is the in-process backend of the stores contract: the
// outbox, its dead letters and the lease table in maps under one mutex.
// Nothing survives the process: use it for tests, for deployments that
// accept losing pending records with the process, and as the reference the
// conformance suite in storetest is checked against.
package memory

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"time"

	"github.com/gobridge/gobridge/stores"
)

var _ stores.Store = (*Store)(nil)

// doneRetention is how many tombstones (keys of delivered or dropped
// records) a store remembers, so that appending such a record again is a
// no-op; older ones are forgotten.
const doneRetention = 100_000

// Options tunes a Store.
type Options struct {
	// Now is the store's clock (CreatedAt, DeadAt). Defaults to time.Now.
	Now func() time.Time
}

// Store is an in-memory stores.Store, safe for concurrent use. Create it
// with New.
type Store struct {
	opts Options

	mu       sync.Mutex
	closed   bool
	seq      int64
	byKey    map[stores.Key]*stores.Record // live and dead records
	parts    map[part][]*stores.Record     // live records per partition, by Seq (with removed ones until compacted)
	coalesce map[ckey]*stores.Record       // the waiting (live, unclaimed) record of each coalesce key
	tombs    []stores.Key                  // tombstones, oldest first
	tombSet  map[stores.Key]bool
	token    int64
	leases   map[string]stores.Lease
}

type part struct {
	session string
	n       int
}

type ckey struct{ session, route, key string }

// New returns an empty store.
func New(opts Options) *Store {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Store{
		opts: opts, byKey: map[stores.Key]*stores.Record{}, parts: map[part][]*stores.Record{},
		coalesce: map[ckey]*stores.Record{}, tombSet: map[stores.Key]bool{}, leases: map[string]stores.Lease{},
	}
}

func (s *Store) lock(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return stores.ErrClosed
	}
	return nil
}

// Write implements stores.Store.
func (s *Store) Write(ctx context.Context, b *stores.Batch) error {
	if err := b.Validate(); err != nil {
		return err
	}
	if err := s.lock(ctx); err != nil {
		return err
	}
	defer s.mu.Unlock()
	now := s.opts.Now()
	for i := range b.Settle {
		s.settle(&b.Settle[i], now)
	}
	for i := range b.Append {
		s.append(&b.Append[i], now)
	}
	return nil
}

func (s *Store) settle(st *stores.Settlement, now time.Time) {
	r := s.byKey[st.Key]
	if r == nil || (st.Outcome == stores.Drop) != (r.State == stores.Dead) ||
		(st.Outcome != stores.Drop && r.Token != st.Token) {
		st.Stale = true
		return
	}
	switch st.Outcome {
	case stores.Done, stores.Drop:
		s.remove(r)
	case stores.Retry:
		r.Attempts, r.FirstAttemptAt, r.NextAttemptAt, r.LastError = st.Attempts, st.FirstAttemptAt, st.NextAttemptAt, st.Reason
	case stores.DeadLetter:
		r.State, r.DeadReason, r.DeadAt = stores.Dead, st.Reason, cmp.Or(st.At, now)
		r.Attempts, r.FirstAttemptAt, r.LastError, r.Token = st.Attempts, st.FirstAttemptAt, st.Reason, 0
	}
}

func (s *Store) append(r *stores.Record, now time.Time) {
	tok := r.Token
	r.Seq, r.Token = 0, 0 // until inserted, claimed
	k := r.Key()
	if s.byKey[k] != nil || s.tombSet[k] {
		return
	}
	if r.State != stores.Dead && r.CoalesceKey != "" {
		if old := s.coalesce[ckey{r.Session, r.Route, r.CoalesceKey}]; old != nil {
			if !stores.Supersedes(r, old, now) {
				return // a newer message is already waiting: absorb this one
			}
			s.remove(old)
		}
	}
	s.seq++
	r.Seq, r.Token = s.seq, tok
	r.Stamp(now)
	if le, ok := s.leases[stores.PartitionLease(r.Session, r.Partition)]; !ok || le.Token != r.Token {
		r.Token = 0
	}
	c := *r
	s.byKey[k] = &c
	if c.State == stores.Live {
		p := part{c.Session, c.Partition}
		s.parts[p] = append(s.parts[p], &c)
		if c.CoalesceKey != "" && c.Token == 0 {
			s.coalesce[ckey{c.Session, c.Route, c.CoalesceKey}] = &c
		}
	}
}

// remove turns a live or dead record into a tombstone.
func (s *Store) remove(r *stores.Record) {
	k := r.Key()
	delete(s.byKey, k)
	s.uncoalesce(r)
	r.State = "" // left in its partition list until compacted there
	s.tombs = append(s.tombs, k)
	s.tombSet[k] = true
	if len(s.tombs) > 2*doneRetention {
		drop := len(s.tombs) - doneRetention
		for _, old := range s.tombs[:drop] {
			delete(s.tombSet, old)
		}
		s.tombs = slices.Clone(s.tombs[drop:])
	}
}

// uncoalesce takes r out of the coalescing index (which holds only
// unclaimed records).
func (s *Store) uncoalesce(r *stores.Record) {
	if ck := (ckey{r.Session, r.Route, r.CoalesceKey}); s.coalesce[ck] == r {
		delete(s.coalesce, ck)
	}
}

// Claim implements stores.Store.
func (s *Store) Claim(ctx context.Context, req stores.ClaimRequest) ([]stores.Record, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	if le, ok := s.leases[stores.PartitionLease(req.Session, req.Partition)]; !ok || le.Token != req.Token {
		return nil, stores.ErrLeaseLost
	}
	p := part{req.Session, req.Partition}
	list := slices.DeleteFunc(s.parts[p], func(r *stores.Record) bool { return r.State != stores.Live })
	s.parts[p] = list
	i, _ := slices.BinarySearchFunc(list, req.After+1, func(r *stores.Record, seq int64) int { return cmp.Compare(r.Seq, seq) })
	var out []stores.Record
	for ; i < len(list) && len(out) < req.Limit; i++ {
		r := list[i]
		if r.Token == req.Token {
			continue
		}
		if r.Token == 0 {
			s.uncoalesce(r)
		}
		r.Token = req.Token
		out = append(out, *r)
	}
	return out, nil
}

// Dead implements stores.Store.
func (s *Store) Dead(ctx context.Context, q stores.DeadQuery) ([]stores.Record, string, error) {
	if q.ID != "" {
		q.After = "" // a query by ID ignores the cursor
	}
	afterAt, afterSeq, err := stores.ParseDeadCursor(q.After)
	if err != nil {
		return nil, "", err
	}
	if err := s.lock(ctx); err != nil {
		return nil, "", err
	}
	defer s.mu.Unlock()
	var dead []stores.Record
	for _, r := range s.byKey {
		at := r.DeadAt.UnixNano()
		if r.State == stores.Dead && (at > afterAt || at == afterAt && r.Seq > afterSeq) &&
			(q.ID == "" && (q.Route == "" || r.Route == q.Route) || r.Envelope.ID == q.ID) {
			dead = append(dead, *r)
		}
	}
	slices.SortFunc(dead, func(a, b stores.Record) int {
		return cmp.Or(a.DeadAt.Compare(b.DeadAt), cmp.Compare(a.Seq, b.Seq))
	})
	return q.Page(dead)
}

// Stats implements stores.Store.
func (s *Store) Stats(ctx context.Context) ([]stores.SessionStats, error) {
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	by := map[string]*stores.SessionStats{}
	for _, r := range s.byKey {
		st := by[r.Session]
		if st == nil {
			st = &stores.SessionStats{Session: r.Session, Routes: map[string]stores.RouteCounts{}}
			by[r.Session] = st
		}
		rc := st.Routes[r.Route]
		if r.State == stores.Dead {
			rc.Dead++
		} else {
			rc.Live++
			st.Live++
			st.Bytes += r.Size()
			if st.Oldest.IsZero() || r.CreatedAt.Before(st.Oldest) {
				st.Oldest = r.CreatedAt
			}
			st.Partitions = max(st.Partitions, r.Partition+1)
		}
		st.Routes[r.Route] = rc
	}
	out := make([]stores.SessionStats, 0, len(by))
	for _, st := range by {
		out = append(out, *st)
	}
	slices.SortFunc(out, func(a, b stores.SessionStats) int { return cmp.Compare(a.Session, b.Session) })
	return out, nil
}

// Close marks the store closed; later calls fail. It is idempotent.
func (s *Store) Close() error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	return nil
}
