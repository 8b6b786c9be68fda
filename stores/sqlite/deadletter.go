package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/gobridge/gobridge/stores"
)

// ListDead implements stores.DeadLetters.
func (s *Store) ListDead(ctx context.Context, f stores.DeadFilter) ([]stores.Record, string, error) {
	limit := f.Limit
	if limit <= 0 {
		limit = 100
	}
	afterAt, afterSeq := int64(math.MinInt64), int64(math.MinInt64)
	if f.After != "" {
		var err error
		if afterAt, afterSeq, err = stores.ParseDeadCursor(f.After); err != nil {
			return nil, "", fmt.Errorf("list dead letters: %w", err)
		}
	}
	var (
		rows *sql.Rows
		err  error
	)
	if f.Route != "" {
		rows, err = s.stmts.listDeadRoute.QueryContext(ctx, f.Route, afterAt, afterSeq, limit+1)
	} else {
		rows, err = s.stmts.listDead.QueryContext(ctx, afterAt, afterSeq, limit+1)
	}
	if err != nil {
		return nil, "", fmt.Errorf("list dead letters: %w", mapErr(err))
	}
	defer rows.Close()
	var out []stores.Record
	for rows.Next() {
		r, err := scanRecord(rows)
		if err != nil {
			return nil, "", fmt.Errorf("list dead letters: %w", err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, "", fmt.Errorf("list dead letters: %w", err)
	}
	if len(out) > limit {
		out = out[:limit]
		return out, stores.DeadCursor(&out[limit-1]), nil
	}
	return out, "", nil
}

// GetDead implements stores.DeadLetters. When several routes hold a dead
// letter with the same envelope ID, it returns the oldest.
func (s *Store) GetDead(ctx context.Context, id string) (stores.Record, error) {
	r, err := scanRecord(s.stmts.getDead.QueryRowContext(ctx, id))
	if errors.Is(err, sql.ErrNoRows) {
		return r, fmt.Errorf("get dead letter: %w: %q", stores.ErrNotFound, id)
	}
	if err != nil {
		return r, fmt.Errorf("get dead letter %q: %w", id, mapErr(err))
	}
	return r, nil
}

// findDeadTx reads the dead letter id inside a write transaction.
func (s *Store) findDeadTx(ctx context.Context, tx *sql.Tx, id string) (stores.Record, error) {
	r, err := scanRecord(tx.StmtContext(ctx, s.stmts.deadByID).QueryRowContext(ctx, id))
	if errors.Is(err, sql.ErrNoRows) {
		return r, fmt.Errorf("%w: dead letter %q", stores.ErrNotFound, id)
	}
	return r, err
}

// Requeue implements stores.DeadLetters (see stores.Requeued for the new
// record). In one transaction the dead letter becomes a done tombstone and
// the new record is appended with a new Seq.
func (s *Store) Requeue(ctx context.Context, id string, now time.Time) (stores.Record, error) {
	var n stores.Record
	err := s.writeTx(ctx, func(tx *sql.Tx, depth map[partKey]int) error {
		d, err := s.findDeadTx(ctx, tx, id)
		if err != nil {
			return err
		}
		if _, err := tx.StmtContext(ctx, s.stmts.tombstone).ExecContext(ctx, d.Seq); err != nil {
			return err
		}
		n = stores.Requeued(d, now)
		if _, err := s.insertRow(ctx, tx.StmtContext(ctx, s.stmts.insert), &n, stores.Pending, now); err != nil {
			return err
		}
		if err := tx.QueryRowContext(ctx, `SELECT last_insert_rowid()`).Scan(&n.Seq); err != nil {
			return err
		}
		depth[partKey{n.Session, n.Partition}]++
		return nil
	})
	if err != nil {
		return stores.Record{}, fmt.Errorf("requeue dead letter: %w", err)
	}
	s.addDone(ctx, 1)
	return n, nil
}

// DropDead implements stores.DeadLetters; the dead letter becomes a done
// tombstone.
func (s *Store) DropDead(ctx context.Context, id string) error {
	err := s.writeTx(ctx, func(tx *sql.Tx, _ map[partKey]int) error {
		d, err := s.findDeadTx(ctx, tx, id)
		if err != nil {
			return err
		}
		_, err = tx.StmtContext(ctx, s.stmts.tombstone).ExecContext(ctx, d.Seq)
		return err
	})
	if err != nil {
		return fmt.Errorf("drop dead letter: %w", err)
	}
	s.addDone(ctx, 1)
	return nil
}
