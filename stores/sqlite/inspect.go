package sqlite

import (
	"context"
	"fmt"
	"time"

	"github.com/gobridge/gobridge/stores"
)

var _ stores.Inspector = (*Store)(nil)

// sqlInspect groups live rows (by their claim state) and dead rows by
// session, route and state. It scans the live table and the dead rows: an
// operator query, never a hot one.
const sqlInspect = `SELECT w.session, w.route, CASE l.claimed WHEN 0 THEN 'pending' ELSE 'claimed' END, count(*),
		coalesce(sum(l.claimed = 0 AND l.next_at <= ?1), 0), min(w.created_at)
	FROM live AS l CROSS JOIN outbox AS w ON w.seq = l.seq
	GROUP BY 1, 2, 3
	UNION ALL
	SELECT session, route, 'dead', count(*), 0, min(created_at) FROM outbox WHERE state = 'dead'
	GROUP BY session, route`

// sqlDoneCount sums the done counters of minutes (from, to].
const sqlDoneCount = `SELECT session, route, sum(n) FROM done_count
	WHERE minute > ? AND minute <= ? GROUP BY session, route`

// Inspect implements stores.Inspector on the read pool, so it works while
// another process (a running bridge) writes to the same file.
func (s *Store) Inspect(ctx context.Context, now time.Time) ([]stores.RouteStats, error) {
	set := stores.RouteStatsSet{}
	get := set.Get
	rows, err := s.r.QueryContext(ctx, sqlInspect, nanos(now))
	if err != nil {
		return nil, fmt.Errorf("inspect: %w", mapErr(err))
	}
	for rows.Next() {
		var (
			session, route, state string
			n, due, oldest        int64
		)
		if err := rows.Scan(&session, &route, &state, &n, &due, &oldest); err != nil {
			rows.Close()
			return nil, fmt.Errorf("inspect: %w", err)
		}
		st := get(session, route)
		switch stores.State(state) {
		case stores.Pending:
			st.Pending, st.Due = int(n), int(due)
		case stores.Claimed:
			st.Claimed = int(n)
		case stores.Dead:
			st.Dead = int(n)
			continue
		}
		if o := fromNanos(oldest); !o.IsZero() && (st.OldestPendingAt.IsZero() || o.Before(st.OldestPendingAt)) {
			st.OldestPendingAt = o
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("inspect: %w", err)
	}
	to := now.Unix() / 60
	rows, err = s.r.QueryContext(ctx, sqlDoneCount, to-60, to)
	if err != nil {
		return nil, fmt.Errorf("inspect: %w", mapErr(err))
	}
	defer rows.Close()
	for rows.Next() {
		var (
			session, route string
			n              int64
		)
		if err := rows.Scan(&session, &route, &n); err != nil {
			return nil, fmt.Errorf("inspect: %w", err)
		}
		get(session, route).DoneLastHour = int(n)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("inspect: %w", err)
	}
	return set.Sorted(), nil
}
