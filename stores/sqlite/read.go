package sqlite

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"

	"github.com/gobridge/gobridge/stores"
)

const (
	// claimQuery claims (?1) up to ?5 live records of a session (?2)
	// partition (?3) after Seq ?4 that are not claimed under ?1.
	claimQuery = `UPDATE outbox SET token=?1 WHERE seq IN (SELECT seq FROM outbox
		WHERE session=?2 AND part=?3 AND state=0 AND seq>?4 AND token<>?1 ORDER BY seq LIMIT ?5) RETURNING ` + columns
	// oldestQuery is the CreatedAt of a session's oldest live record and
	// the highest partition of its live records (one search of an index
	// each).
	oldestQuery = `SELECT (SELECT min(created_at) FROM outbox WHERE session=?1 AND state=0),
		(SELECT max(part) FROM outbox WHERE session=?1 AND state=0)`
)

// deadList lists dead letters after a cursor (dead_at, seq), and
// deadListOfRoute those of one route (one query per index); deadByID lists
// those of an envelope ID.
const (
	deadList        = `SELECT ` + columns + ` FROM outbox WHERE state=1 AND (dead_at, seq) > (?, ?) ORDER BY dead_at, seq LIMIT ?`
	deadListOfRoute = `SELECT ` + columns + ` FROM outbox WHERE state=1 AND (dead_at, seq) > (?, ?) AND route=? ORDER BY dead_at, seq LIMIT ?`
	deadByID        = `SELECT ` + columns + ` FROM outbox INDEXED BY outbox_key WHERE state=1 AND id=? ORDER BY dead_at, seq LIMIT ?`
)

// Claim implements stores.Store: one transaction that checks the lease and
// claims with one statement, from req.After on (Seqs follow commit order).
func (s *Store) Claim(ctx context.Context, req stores.ClaimRequest) ([]stores.Record, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	if err := s.enter(ctx, true); err != nil {
		return nil, fmt.Errorf("sqlite: claim: %w", err)
	}
	defer s.leave()
	var out []stores.Record
	err := s.tx(ctx, false, func() error { // a lost claim is void anyway
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
	query, args := deadByID, []any{q.ID}
	if q.ID == "" {
		at, seq, err := stores.ParseDeadCursor(q.After)
		if err != nil {
			return nil, "", err
		}
		query, args = deadList, []any{at, seq}
		if q.Route != "" {
			query, args = deadListOfRoute, append(args, q.Route)
		}
	}
	if q.NoPayload { // SQLite reads a blob's length, not its content
		query = strings.Replace(query, "payload,", "length(payload),", 1)
	}
	if err := s.enter(ctx, false); err != nil {
		return nil, "", fmt.Errorf("sqlite: dead letters: %w", err)
	}
	defer s.leave()
	out, err := s.records(ctx, query, append(args, q.PageSize()+1)...)
	if err != nil {
		return nil, "", fmt.Errorf("sqlite: dead letters: %w", err)
	}
	return q.Page(out)
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

// Stats implements stores.Store: the counts table and, per session with
// live records, one search of the age index.
func (s *Store) Stats(ctx context.Context) ([]stores.SessionStats, error) {
	if err := s.enter(ctx, false); err != nil {
		return nil, fmt.Errorf("sqlite: stats: %w", err)
	}
	defer s.leave()
	var out []stores.SessionStats
	err := s.each(ctx, `SELECT session, route, live, dead, bytes FROM counts WHERE live<>0 OR dead<>0 ORDER BY session`, nil,
		func(rows *sql.Rows) error {
			var (
				session, route string
				c              stores.RouteCounts
				bytes          int64
			)
			if err := rows.Scan(&session, &route, &c.Live, &c.Dead, &bytes); err != nil {
				return err
			}
			if len(out) == 0 || out[len(out)-1].Session != session {
				out = append(out, stores.SessionStats{Session: session, Routes: map[string]stores.RouteCounts{}})
			}
			st := &out[len(out)-1]
			st.Live, st.Bytes, st.Routes[route] = st.Live+c.Live, st.Bytes+bytes, c
			return nil
		})
	for i := 0; err == nil && i < len(out); i++ {
		if out[i].Live > 0 {
			var oldest, part sql.NullInt64 // NULL only if the counts and the rows ever disagreed
			if _, err = s.queryRow(ctx, oldestQuery, []any{out[i].Session}, &oldest, &part); oldest.Valid {
				out[i].Oldest, out[i].Partitions = fromNanos(oldest.Int64), int(part.Int64)+1
			}
		}
	}
	if err != nil {
		return nil, fmt.Errorf("sqlite: stats: %w", err)
	}
	return out, nil
}
