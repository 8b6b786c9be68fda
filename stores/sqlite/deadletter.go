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

// sqlInsertDead inserts a dead letter unless its key exists, in any state
// (done tombstones included). It is a cold path, so it is not prepared.
const sqlInsertDead = `INSERT INTO outbox (session, part, route, id, topic, payload, headers, qos, received_at,
	okey, ckey, causation_id, state, attempts, first_attempt_at, next_at, last_error, created_at,
	expires_at, token, claim_until, dead_at, dead_reason)
	VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'dead', ?, ?, ?, ?, ?, ?, 0, 0, ?, ?)
	ON CONFLICT (session, route, id) DO NOTHING`

// AppendDead implements stores.DeadLetters in one transaction, one durable
// commit. Dead rows are not live, so the depth table is left as it is. A
// failed commit (disk full: stores.ErrFull) persists nothing of the call.
func (s *Store) AppendDead(ctx context.Context, recs ...stores.Record) error {
	for i := range recs {
		if err := recs[i].ValidateDead(); err != nil {
			return fmt.Errorf("append dead letters: %w", err)
		}
	}
	if len(recs) == 0 {
		return nil
	}
	now := time.Now()
	err := s.writeTx(ctx, func(tx *sql.Tx, _ map[partKey]int) error {
		for i := range recs {
			r := &recs[i]
			headers, err := encodeHeaders(r.Envelope.Headers)
			if err != nil {
				return fmt.Errorf("encode headers of %s: %w", r.Envelope.ID, err)
			}
			payload := r.Envelope.Payload
			if payload == nil {
				payload = []byte{}
			}
			created, deadAt := r.CreatedAt, r.DeadAt
			if created.IsZero() {
				created = now
			}
			if deadAt.IsZero() {
				deadAt = now
			}
			_, err = tx.ExecContext(ctx, sqlInsertDead, r.Session, r.Partition, r.Route, r.Envelope.ID,
				r.Envelope.Topic, payload, headers, r.Envelope.QoS, nanos(r.Envelope.ReceivedAt), r.Envelope.Key,
				r.CoalesceKey, r.CausationID, r.Attempts, nanos(r.FirstAttemptAt), nanos(r.NextAttemptAt),
				r.LastError, nanos(created), nanos(r.ExpiresAt), nanos(deadAt), r.DeadReason)
			if err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("append %d dead letters: %w", len(recs), err)
	}
	return nil
}
