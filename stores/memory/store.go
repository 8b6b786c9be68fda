// Package memory is the in-process backend of the stores contracts: an outbox
// with dead letters (Store) and a lease table (Leases), both guarded by one
// mutex each. Nothing survives the process: use it for tests, for direct_hold
// deployments that want no disk, and as the reference the conformance suites
// in storetest are checked against.
package memory

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/gobridge/gobridge/stores"
)

// Interface guards.
var (
	_ stores.Store  = (*Store)(nil)
	_ stores.Leases = (*Leases)(nil)
)

// DefaultDoneRetention is how many completed record keys a store remembers
// by default so that a redelivered message is not delivered twice.
const DefaultDoneRetention = 100_000

// Options tunes a Store.
type Options struct {
	// DoneRetention is how many done records (delivered, dropped or
	// coalesced away) the store keeps as key-only tombstones so that
	// re-appending them is a no-op; older ones are compacted away and a
	// re-append of those is accepted as new. Defaults to
	// DefaultDoneRetention; negative keeps none.
	DoneRetention int
}

// Store is an in-memory stores.Store. It is safe for concurrent use. The zero
// value is not usable; call New.
type Store struct {
	opts Options

	mu       sync.Mutex
	closed   bool
	seq      int64
	byKey    map[stores.Key]*entry
	parts    map[partKey]*list
	sessions map[string]*session
	coalesce map[coalesceKey]*entry
	dead     []*entry // sorted by (DeadAt, Seq)
	done     []stores.Key
	doneHead int // done[doneHead:] are the remembered done keys, oldest first

	doneCounts map[doneKey]int // completions per route and minute (Inspect)
	doneMinute int64           // the newest minute counted
}

type partKey struct {
	session string
	part    int
}

type coalesceKey struct {
	session, route, key string
}

// session keeps the live (pending or claimed) count of one session and the
// partition lists its live records are in.
type session struct {
	live  int
	parts map[int]*list
}

// New returns an empty store with default options.
func New() *Store { return NewWithOptions(Options{}) }

// NewWithOptions returns an empty store tuned by opts.
func NewWithOptions(opts Options) *Store {
	if opts.DoneRetention == 0 {
		opts.DoneRetention = DefaultDoneRetention
	}
	return &Store{
		opts:     opts,
		byKey:    make(map[stores.Key]*entry),
		parts:    make(map[partKey]*list),
		sessions: make(map[string]*session),
		coalesce: make(map[coalesceKey]*entry),
	}
}

// Close marks the store closed; later calls fail. It is idempotent.
func (s *Store) Close() error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	return nil
}

var errClosed = fmt.Errorf("memory store: closed")

// lock takes the mutex and checks ctx and closed; on error the mutex is not
// held.
func (s *Store) lock(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return errClosed
	}
	return nil
}

// Append implements stores.Outbox.
func (s *Store) Append(ctx context.Context, recs ...stores.Record) error {
	if err := s.appendNew(ctx, recs, (*stores.Record).Validate, func(r stores.Record, _ time.Time) { s.insert(r) }); err != nil {
		return fmt.Errorf("append: %w", err)
	}
	return nil
}

// appendNew validates recs and, under the mutex, hands each one whose key
// is new to add, with CreatedAt stamped and its own headers map.
func (s *Store) appendNew(ctx context.Context, recs []stores.Record, validate func(*stores.Record) error,
	add func(r stores.Record, now time.Time)) error {
	for i := range recs {
		if err := validate(&recs[i]); err != nil {
			return err
		}
	}
	if err := s.lock(ctx); err != nil {
		return err
	}
	defer s.mu.Unlock()
	now := time.Now()
	for _, r := range recs {
		if _, ok := s.byKey[r.Key()]; ok {
			continue
		}
		if r.CreatedAt.IsZero() {
			r.CreatedAt = now
		}
		r.Envelope.Headers = maps.Clone(r.Envelope.Headers)
		add(r, now)
	}
	return nil
}

// insert adds a new record as pending (or absorbs it as done when a newer
// record of its coalesce key is pending). The caller holds the mutex and
// has checked the key is new.
func (s *Store) insert(r stores.Record) {
	s.seq++
	r.Seq = s.seq
	r.State = stores.Pending
	r.Token, r.ClaimUntil = 0, time.Time{}
	r.DeadAt, r.DeadReason = time.Time{}, ""
	e := &entry{rec: r}
	s.byKey[r.Key()] = e
	if r.CoalesceKey != "" {
		ck := coalesceKey{r.Session, r.Route, r.CoalesceKey}
		if old, ok := s.coalesce[ck]; ok {
			if r.Envelope.ReceivedAt.Before(old.rec.Envelope.ReceivedAt) {
				// An older message never replaces a newer one.
				s.markDone(e)
				return
			}
			if old.rec.NextAttemptAt.After(e.rec.NextAttemptAt) {
				// The replacement inherits the replaced record's
				// backoff: a new message must not make a backed-off key
				// due at once.
				e.rec.NextAttemptAt = old.rec.NextAttemptAt
			}
			s.unlink(old)
			s.markDone(old)
		}
		s.coalesce[ck] = e
	}
	s.link(e)
}

// markDone turns e into a key-only tombstone and remembers its key for
// DoneRetention more completions. e is not linked.
func (s *Store) markDone(e *entry) {
	e.rec.State = stores.Done
	e.rec.Envelope.Payload = nil
	e.rec.Envelope.Headers = nil
	s.done = append(s.done, e.rec.Key())
	for len(s.done)-s.doneHead > max(s.opts.DoneRetention, 0) {
		k := s.done[s.doneHead]
		s.done[s.doneHead] = stores.Key{}
		s.doneHead++
		if old, ok := s.byKey[k]; ok && old.rec.State == stores.Done {
			delete(s.byKey, k)
		}
	}
	if s.doneHead > 1024 && s.doneHead > len(s.done)/2 {
		s.done = append(s.done[:0:0], s.done[s.doneHead:]...)
		s.doneHead = 0
	}
}

// link appends e (newest Seq) to its partition list and counts it live.
func (s *Store) link(e *entry) {
	pk := partKey{e.rec.Session, e.rec.Partition}
	l := s.parts[pk]
	if l == nil {
		l = &list{}
		s.parts[pk] = l
		ss := s.sessions[pk.session]
		if ss == nil {
			ss = &session{parts: make(map[int]*list)}
			s.sessions[pk.session] = ss
		}
		ss.parts[pk.part] = l
	}
	l.pushBack(e)
	s.sessions[pk.session].live++
}

// unlink removes a live e from its partition list and the coalesce index.
func (s *Store) unlink(e *entry) {
	e.list.remove(e)
	s.sessions[e.rec.Session].live--
	s.dropCoalesce(e)
}

func (s *Store) dropCoalesce(e *entry) {
	if e.rec.CoalesceKey == "" {
		return
	}
	ck := coalesceKey{e.rec.Session, e.rec.Route, e.rec.CoalesceKey}
	if s.coalesce[ck] == e {
		delete(s.coalesce, ck)
	}
}

// Stats implements stores.Outbox. It costs one map lookup plus one look at
// the head of each of the session's partitions.
func (s *Store) Stats(ctx context.Context, sessionID string) (stores.SessionStats, error) {
	if err := s.lock(ctx); err != nil {
		return stores.SessionStats{}, fmt.Errorf("stats: %w", err)
	}
	defer s.mu.Unlock()
	var st stores.SessionStats
	ss := s.sessions[sessionID]
	if ss == nil {
		return st, nil
	}
	st.Pending = ss.live
	var oldest *entry
	for _, l := range ss.parts {
		if h := l.head; h != nil && (oldest == nil || h.rec.Seq < oldest.rec.Seq) {
			oldest = h
		}
	}
	if oldest != nil {
		st.OldestCreatedAt = oldest.rec.CreatedAt
	}
	return st, nil
}
