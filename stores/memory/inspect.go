package memory

import (
	"context"
	"fmt"
	"time"

	"github.com/gobridge/gobridge/stores"
)

var _ stores.Inspector = (*Store)(nil)

// doneBucketWidth is the width of one done-counter bucket; doneKeep is how
// many buckets are kept (an hour and a bit).
const (
	doneBucketWidth = time.Minute
	doneKeep        = 61
)

// doneKey names one done counter: completions of a route in one minute.
type doneKey struct {
	session, route string
	minute         int64
}

// countDone counts one completion of e at the wall clock, and forgets
// buckets older than doneKeep minutes when a new minute starts. The caller
// holds the mutex.
func (s *Store) countDone(e *entry) {
	m := time.Now().UnixNano() / int64(doneBucketWidth)
	if s.doneCounts == nil {
		s.doneCounts = map[doneKey]int{}
	}
	if m != s.doneMinute {
		s.doneMinute = m
		for k := range s.doneCounts {
			if k.minute < m-doneKeep {
				delete(s.doneCounts, k)
			}
		}
	}
	s.doneCounts[doneKey{e.rec.Session, e.rec.Route, m}]++
}

// Inspect implements stores.Inspector. It walks every live record and dead
// letter under the store's mutex.
func (s *Store) Inspect(ctx context.Context, now time.Time) ([]stores.RouteStats, error) {
	if err := s.lock(ctx); err != nil {
		return nil, fmt.Errorf("inspect: %w", err)
	}
	defer s.mu.Unlock()
	set := stores.RouteStatsSet{}
	get := set.Get
	for _, l := range s.parts {
		for e := l.head; e != nil; e = e.next {
			r := &e.rec
			st := get(r.Session, r.Route)
			switch r.State {
			case stores.Pending:
				st.Pending++
				if !r.NextAttemptAt.After(now) {
					st.Due++
				}
			case stores.Claimed:
				st.Claimed++
			}
			if st.OldestPendingAt.IsZero() || r.CreatedAt.Before(st.OldestPendingAt) {
				st.OldestPendingAt = r.CreatedAt
			}
		}
	}
	for _, e := range s.dead {
		get(e.rec.Session, e.rec.Route).Dead++
	}
	from := now.Add(-time.Hour).UnixNano() / int64(doneBucketWidth)
	to := now.UnixNano() / int64(doneBucketWidth)
	for k, n := range s.doneCounts {
		if k.minute > from && k.minute <= to {
			get(k.session, k.route).DoneLastHour += n
		}
	}
	return set.Sorted(), nil
}
