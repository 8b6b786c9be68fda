package memory

import (
	"context"
	"fmt"
	"time"

	"github.com/gobridge/gobridge/stores"
)

// Claim implements stores.Outbox. It walks the partition's live records in
// Seq order, so its cost grows with the records it skips (claimed, not due,
// or held back by their ordering key) before it finds req.Limit claimable
// ones. Ordering keys are checked within the partition, which is exact as
// long as a key always maps to one partition (stores.PartitionOf); the
// SQLite store checks the whole session.
func (s *Store) Claim(ctx context.Context, req stores.ClaimRequest) ([]stores.Record, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	if err := s.lock(ctx); err != nil {
		return nil, fmt.Errorf("claim: %w", err)
	}
	defer s.mu.Unlock()
	l := s.parts[partKey{req.Session, req.Partition}]
	if l == nil {
		return nil, nil
	}
	out := make([]stores.Record, 0, min(req.Limit, 256))
	var blocked map[string]bool // ordering keys held back by an older record
	for e := l.head; e != nil && len(out) < req.Limit; e = e.next {
		r := &e.rec
		claimable := (r.State == stores.Pending && !r.NextAttemptAt.After(req.Now)) ||
			(r.State == stores.Claimed && !r.ClaimUntil.After(req.Now))
		if k := r.Envelope.Key; k != "" {
			if blocked[k] {
				continue
			}
			if !claimable {
				if blocked == nil {
					blocked = make(map[string]bool)
				}
				blocked[k] = true
			}
		}
		if !claimable {
			continue
		}
		if r.State == stores.Pending {
			s.dropCoalesce(e)
		}
		r.State = stores.Claimed
		r.Token = req.Token
		r.ClaimUntil = req.Until
		r.Attempts++
		if r.FirstAttemptAt.IsZero() {
			r.FirstAttemptAt = req.Now
		}
		out = append(out, *r)
	}
	return out, nil
}

// owned returns the live entry rec names if it is still claimed under
// rec.Token. The caller holds the mutex.
func (s *Store) owned(rec *stores.Record) (*entry, error) {
	e, ok := s.byKey[rec.Key()]
	if !ok || e.rec.State != stores.Claimed || e.rec.Token != rec.Token {
		return nil, fmt.Errorf("%w: record %s/%s/%s, token %d", stores.ErrStaleToken,
			rec.Session, rec.Route, rec.Envelope.ID, rec.Token)
	}
	return e, nil
}

// Complete implements stores.Outbox: all records or none.
func (s *Store) Complete(ctx context.Context, recs ...stores.Record) error {
	if err := s.lock(ctx); err != nil {
		return fmt.Errorf("complete: %w", err)
	}
	defer s.mu.Unlock()
	es := make([]*entry, len(recs))
	for i := range recs {
		e, err := s.owned(&recs[i])
		if err != nil {
			return fmt.Errorf("complete: %w", err)
		}
		es[i] = e
	}
	for _, e := range es {
		if e.rec.State != stores.Claimed { // named twice in the batch
			continue
		}
		s.unlink(e)
		s.markDone(e)
		s.countDone(e)
	}
	return nil
}

// Release implements stores.Outbox.
func (s *Store) Release(ctx context.Context, rec stores.Record, next time.Time, lastError string) error {
	if err := s.lock(ctx); err != nil {
		return fmt.Errorf("release: %w", err)
	}
	defer s.mu.Unlock()
	e, err := s.owned(&rec)
	if err != nil {
		return fmt.Errorf("release: %w", err)
	}
	e.rec.State = stores.Pending
	e.rec.NextAttemptAt = next
	e.rec.LastError = lastError
	if k := e.rec.CoalesceKey; k != "" {
		s.coalesceReleased(e, coalesceKey{e.rec.Session, e.rec.Route, k})
	}
	return nil
}

// coalesceReleased keeps one pending record per coalesce key after e went
// back to pending: a pending record of its key appended while e was claimed
// supersedes e when it is at least as new (e becomes done, not delivered,
// and the other one is due no earlier than e); an older one is absorbed
// instead, and e keeps the later next attempt of the two. The caller holds
// the mutex.
func (s *Store) coalesceReleased(e *entry, ck coalesceKey) {
	cur, ok := s.coalesce[ck]
	if !ok {
		s.coalesce[ck] = e
		return
	}
	keep, gone := cur, e
	if cur.rec.Envelope.ReceivedAt.Before(e.rec.Envelope.ReceivedAt) {
		keep, gone = e, cur
	}
	if gone.rec.NextAttemptAt.After(keep.rec.NextAttemptAt) {
		keep.rec.NextAttemptAt = gone.rec.NextAttemptAt
	}
	s.unlink(gone)
	s.markDone(gone)
	s.coalesce[ck] = keep
}
