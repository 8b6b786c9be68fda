package memory

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/gobridge/gobridge/stores"
)

// DeadLetter implements stores.Outbox.
func (s *Store) DeadLetter(ctx context.Context, rec stores.Record, reason string) error {
	if err := s.lock(ctx); err != nil {
		return fmt.Errorf("dead-letter: %w", err)
	}
	defer s.mu.Unlock()
	e, err := s.owned(&rec)
	if err != nil {
		return fmt.Errorf("dead-letter: %w", err)
	}
	s.unlink(e)
	e.rec.State = stores.Dead
	e.rec.DeadAt = rec.DeadAt
	if e.rec.DeadAt.IsZero() {
		e.rec.DeadAt = time.Now()
	}
	e.rec.DeadReason = reason
	s.insertDead(e)
	return nil
}

// AppendDead implements stores.DeadLetters: new records go straight to the
// dead letters, never into a partition list, so they are not live.
func (s *Store) AppendDead(ctx context.Context, recs ...stores.Record) error {
	err := s.appendNew(ctx, recs, (*stores.Record).ValidateDead, func(r stores.Record, now time.Time) {
		s.seq++
		r.Seq = s.seq
		r.State = stores.Dead
		r.Token, r.ClaimUntil = 0, time.Time{}
		if r.DeadAt.IsZero() {
			r.DeadAt = now
		}
		e := &entry{rec: r}
		s.byKey[r.Key()] = e
		s.insertDead(e)
	})
	if err != nil {
		return fmt.Errorf("append dead letters: %w", err)
	}
	return nil
}

// insertDead adds e to the dead letters in list order. The caller holds the
// mutex.
func (s *Store) insertDead(e *entry) {
	i := sort.Search(len(s.dead), func(i int) bool { return !deadLess(s.dead[i], e) })
	s.dead = append(s.dead, nil)
	copy(s.dead[i+1:], s.dead[i:])
	s.dead[i] = e
}

func deadLess(a, b *entry) bool {
	if !a.rec.DeadAt.Equal(b.rec.DeadAt) {
		return a.rec.DeadAt.Before(b.rec.DeadAt)
	}
	return a.rec.Seq < b.rec.Seq
}

// ListDead implements stores.DeadLetters.
func (s *Store) ListDead(ctx context.Context, f stores.DeadFilter) ([]stores.Record, string, error) {
	limit := f.Limit
	if limit <= 0 {
		limit = 100
	}
	var afterAt, afterSeq int64
	if f.After != "" {
		var err error
		if afterAt, afterSeq, err = stores.ParseDeadCursor(f.After); err != nil {
			return nil, "", fmt.Errorf("list dead letters: %w", err)
		}
	}
	if err := s.lock(ctx); err != nil {
		return nil, "", fmt.Errorf("list dead letters: %w", err)
	}
	defer s.mu.Unlock()
	i := 0
	if f.After != "" {
		i = sort.Search(len(s.dead), func(i int) bool {
			at := s.dead[i].rec.DeadAt.UnixNano()
			return at > afterAt || (at == afterAt && s.dead[i].rec.Seq > afterSeq)
		})
	}
	var out []stores.Record
	for ; i < len(s.dead); i++ {
		e := s.dead[i]
		if f.Route != "" && e.rec.Route != f.Route {
			continue
		}
		if len(out) == limit {
			return out, stores.DeadCursor(&out[len(out)-1]), nil
		}
		out = append(out, e.rec)
	}
	return out, "", nil
}

// findDead returns the index of the first dead letter (in list order) with
// envelope ID id. The caller holds the mutex.
func (s *Store) findDead(id string) (int, error) {
	for i, e := range s.dead {
		if e.rec.Envelope.ID == id {
			return i, nil
		}
	}
	return 0, fmt.Errorf("%w: dead letter %q", stores.ErrNotFound, id)
}

// GetDead implements stores.DeadLetters.
func (s *Store) GetDead(ctx context.Context, id string) (stores.Record, error) {
	if err := s.lock(ctx); err != nil {
		return stores.Record{}, fmt.Errorf("get dead letter: %w", err)
	}
	defer s.mu.Unlock()
	i, err := s.findDead(id)
	if err != nil {
		return stores.Record{}, fmt.Errorf("get dead letter: %w", err)
	}
	return s.dead[i].rec, nil
}

// removeDead takes the i-th dead letter out of the list and leaves it as a
// done tombstone, so re-appending its ID stays a no-op.
func (s *Store) removeDead(i int) *entry {
	e := s.dead[i]
	s.dead = append(s.dead[:i], s.dead[i+1:]...)
	return e
}

// Requeue implements stores.DeadLetters. The new record keeps the envelope
// (payload, topic, headers, ordering key, ReceivedAt) under a new ID, is due
// at now with CreatedAt now, and keeps the time it had left to live: an
// ExpiresAt is moved by now-CreatedAt of the dead letter.
func (s *Store) Requeue(ctx context.Context, id string, now time.Time) (stores.Record, error) {
	if err := s.lock(ctx); err != nil {
		return stores.Record{}, fmt.Errorf("requeue dead letter: %w", err)
	}
	defer s.mu.Unlock()
	i, err := s.findDead(id)
	if err != nil {
		return stores.Record{}, fmt.Errorf("requeue dead letter: %w", err)
	}
	old := s.removeDead(i)
	r := stores.Requeued(old.rec, now)
	s.markDone(old)
	s.insert(r)
	return s.byKey[r.Key()].rec, nil
}

// DropDead implements stores.DeadLetters.
func (s *Store) DropDead(ctx context.Context, id string) error {
	if err := s.lock(ctx); err != nil {
		return fmt.Errorf("drop dead letter: %w", err)
	}
	defer s.mu.Unlock()
	i, err := s.findDead(id)
	if err != nil {
		return fmt.Errorf("drop dead letter: %w", err)
	}
	s.markDone(s.removeDead(i))
	return nil
}
