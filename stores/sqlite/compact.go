package sqlite

import (
	"context"
	"database/sql"
)

// addDone counts n new done tombstones and, past the retention plus a slack
// of 1,000, deletes the oldest ones in one transaction: completed records
// first (by seq), then tombstones of coalesced, requeued or dropped
// records. A failed compaction is retried on the next call; it never fails
// the caller.
func (s *Store) addDone(ctx context.Context, n int64) {
	if n == 0 {
		return
	}
	keep := int64(max(s.opts.DoneRetention, 0))
	if s.doneCount.Add(n) <= keep+1000 {
		return
	}
	if !s.compactMu.TryLock() {
		return
	}
	defer s.compactMu.Unlock()
	excess := s.doneCount.Load() - keep
	if excess <= 0 {
		return
	}
	var deleted int64
	ctx = context.WithoutCancel(ctx)
	err := s.writeTx(ctx, func(tx *sql.Tx, _ map[partKey]int) error {
		deleted = 0
		var last int64 // the newest completed seq to delete
		err := tx.QueryRowContext(ctx, `SELECT coalesce(max(seq), 0) FROM
			(SELECT seq FROM completed ORDER BY seq LIMIT ?)`, excess).Scan(&last)
		if err != nil {
			return err
		}
		if last > 0 {
			res, err := tx.ExecContext(ctx, `DELETE FROM outbox WHERE seq IN (SELECT seq FROM completed WHERE seq <= ?)`, last)
			if err != nil {
				return err
			}
			if deleted, err = res.RowsAffected(); err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, `DELETE FROM completed WHERE seq <= ?`, last); err != nil {
				return err
			}
		}
		if deleted >= excess {
			return nil
		}
		res, err := tx.ExecContext(ctx, `DELETE FROM outbox WHERE seq IN
			(SELECT seq FROM outbox INDEXED BY outbox_done WHERE state='done' ORDER BY seq LIMIT ?)`, excess-deleted)
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		deleted += n
		return err
	})
	if err == nil {
		s.doneCount.Add(-deleted)
	}
}
