package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/gobridge/gobridge/stores"
)

// Stats implements stores.Outbox on the read pool: one read of the depth
// counters, then for each partition with live records its first live row by
// seq (one probe of the live table's key).
func (s *Store) Stats(ctx context.Context, session string) (stores.SessionStats, error) {
	var st stores.SessionStats
	rows, err := s.stmts.depthRows.QueryContext(ctx, session)
	if err != nil {
		return st, fmt.Errorf("stats %s: %w", session, mapErr(err))
	}
	var parts []int
	for rows.Next() {
		var part, live int
		if err := rows.Scan(&part, &live); err != nil {
			rows.Close()
			return st, fmt.Errorf("stats %s: %w", session, err)
		}
		st.Pending += live
		parts = append(parts, part)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return st, fmt.Errorf("stats %s: %w", session, err)
	}
	oldestSeq := int64(-1)
	for _, part := range parts {
		var seq, created int64
		err := s.stmts.oldestLive.QueryRowContext(ctx, session, part).Scan(&seq, &created)
		if errors.Is(err, sql.ErrNoRows) {
			continue
		}
		if err != nil {
			return st, fmt.Errorf("stats %s: %w", session, err)
		}
		if oldestSeq < 0 || seq < oldestSeq {
			oldestSeq = seq
			st.OldestCreatedAt = fromNanos(created)
		}
	}
	return st, nil
}
