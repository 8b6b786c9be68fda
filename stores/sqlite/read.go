package sqlite

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"slices"

	"github.com/gobridge/gobridge/stores"
)

const (
	// claimQuery claims (?1) up to ?5 live records of a session (?2)
	// partition (?3) after Seq ?4 that are not claimed under ?1.
	claimQuery = `UPDATE outbox SET token=?1 WHERE seq IN (SELECT seq FROM outbox
		WHERE session=?2 AND part=?3 AND state=0 AND seq>?4 AND token<>?1 ORDER BY seq LIMIT ?5) RETURNING ` + columns
	// oldestQuery is the CreatedAt of a session's oldest live record.
	oldestQuery = `SELECT min(created_at) FROM outbox WHERE session=? AND state=0`
)

// deadQuery lists dead letters after a cursor (dead_at, seq), by ID or
// route when asked, one query per index.
func deadQuery(byID, byRoute bool) string {
	q := `SELECT ` + columns + ` FROM outbox WHERE state=1 AND (dead_at, seq) > (?, ?)`
	if byID {
		q = `SELECT ` + columns + ` FROM outbox INDEXED BY outbox_key WHERE state=1 AND (dead_at, seq) > (?, ?) AND id=?`
	}
	if byRoute {
		q += ` AND route=?`
	}
	return q + ` ORDER BY dead_at, seq LIMIT ?`
}

// Claim implements stores.Store: one transaction that checks the lease and
// claims with one statement, from req.After on (Seqs follow commit order).
func (s *Store) Claim(ctx context.Context, req stores.ClaimRequest) ([]stores.Record, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	if err := s.enter(ctx, true); err != nil {
		return nil, fmt.Errorf("sqlite: claim: %w", err)
	}
	defer s.mu.Unlock()
	var out []stores.Record
	err := s.tx(ctx, func() error {
		var cur int64
		name := stores.PartitionLease(req.Session, req.Partition)
		if _, err := s.queryRow(ctx, leaseQuery, []any{name}, &cur); err != nil || cur != req.Token {
			return cmp.Or(err, stores.ErrLeaseLost)
		}
		var err error
		out, err = s.records(ctx, claimQuery, req.Token, req.Session, req.Partition, req.After, req.Limit)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("sqlite: claim: %w", mapErr(err))
	}
	slices.SortFunc(out, func(a, b stores.Record) int { return cmp.Compare(a.Seq, b.Seq) })
	return out, nil
}

// Dead implements stores.Store.
func (s *Store) Dead(ctx context.Context, q stores.DeadQuery) ([]stores.Record, string, error) {
	args := []any{int64(-1 << 63), int64(0)}
	if q.After != "" {
		at, seq, err := stores.ParseDeadCursor(q.After)
		if err != nil {
			return nil, "", err
		}
		args = []any{at, seq}
	}
	if q.ID != "" {
		args = append(args, q.ID)
	}
	if q.Route != "" {
		args = append(args, q.Route)
	}
	limit := cmp.Or(max(q.Limit, 0), 100)
	if err := s.enter(ctx, false); err != nil {
		return nil, "", fmt.Errorf("sqlite: dead letters: %w", err)
	}
	defer s.mu.Unlock()
	out, err := s.records(ctx, deadQuery(q.ID != "", q.Route != ""), append(args, limit+1)...)
	switch {
	case err != nil:
		return nil, "", fmt.Errorf("sqlite: dead letters: %w", err)
	case q.ID != "" && len(out) == 0:
		return nil, "", stores.ErrNotFound
	case len(out) > limit:
		return out[:limit], stores.DeadCursor(&out[limit-1]), nil
	}
	return out, "", nil
}

// records runs query and returns the records it selects.
func (s *Store) records(ctx context.Context, query string, args ...any) ([]stores.Record, error) {
	var out []stores.Record
	err := s.each(ctx, query, args, func(rows *sql.Rows) error {
		r, err := scanRecord(rows)
		out = append(out, r)
		return err
	})
	return out, err
}

// Stats implements stores.Store: the counters in memory and, per session
// with live records, one search of the age index. A read-only store counts
// the file instead.
func (s *Store) Stats(ctx context.Context) ([]stores.SessionStats, error) {
	if err := s.enter(ctx, false); err != nil {
		return nil, fmt.Errorf("sqlite: stats: %w", err)
	}
	defer s.mu.Unlock()
	all := s.counts
	if s.opts.ReadOnly {
		var err error
		if all, err = s.count(ctx); err != nil {
			return nil, fmt.Errorf("sqlite: stats: %w", err)
		}
	}
	by := map[string]*stores.SessionStats{}
	for p, c := range all {
		st := by[p.session]
		if st == nil {
			st = &stores.SessionStats{Session: p.session, Routes: map[string]stores.RouteCounts{}}
			by[p.session] = st
		}
		st.Live, st.Bytes = st.Live+c.live, st.Bytes+c.bytes
		st.Routes[p.route] = stores.RouteCounts{Live: c.live, Dead: c.dead}
	}
	out := make([]stores.SessionStats, 0, len(by))
	for _, st := range by {
		if st.Live > 0 {
			var oldest sql.NullInt64 // NULL when the records were settled since they were counted
			if _, err := s.queryRow(ctx, oldestQuery, []any{st.Session}, &oldest); err != nil {
				return nil, fmt.Errorf("sqlite: stats: %w", err)
			}
			if oldest.Valid {
				st.Oldest = fromNanos(oldest.Int64)
			}
		}
		out = append(out, *st)
	}
	slices.SortFunc(out, func(a, b stores.SessionStats) int { return cmp.Compare(a.Session, b.Session) })
	return out, nil
}
