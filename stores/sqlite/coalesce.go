package sqlite

import (
	"context"
	"database/sql"
	"errors"

	"github.com/gobridge/gobridge/stores"
)

// sqlCoalesceOther finds the newest pending record of a coalesce key other
// than the one just released (seq ?4).
const sqlCoalesceOther = `SELECT seq, part, received_at, next_at FROM outbox INDEXED BY outbox_coalesce
	WHERE state='pending' AND ckey<>'' AND session = ?1 AND route = ?2 AND ckey = ?3 AND seq <> ?4
	ORDER BY seq DESC LIMIT 1`

// sqlLaterNext makes a pending record due no earlier than ?1.
const sqlLaterNext = `UPDATE outbox SET next_at = MAX(next_at, ?1) WHERE seq = ?2 AND state='pending'`

// settleReleased keeps one pending record per coalesce key after rec (just
// released, due at next) went back to pending: a pending record of the same
// key appended while rec was claimed supersedes it when that one is at least
// as new (rec becomes done, not delivered, and the other one is due no
// earlier than next); an older one is absorbed instead, and rec keeps the
// later next attempt of the two. It returns how many done tombstones it
// made.
func (s *Store) settleReleased(ctx context.Context, tx *sql.Tx, rec *stores.Record, next int64, depth map[partKey]int) (int64, error) {
	var (
		ckey        string
		recv        int64
		part        int
		oSeq, oRecv int64
		oNext       int64
		oPart       int
	)
	err := tx.QueryRowContext(ctx, `SELECT ckey, received_at, part FROM outbox WHERE seq = ?`, rec.Seq).
		Scan(&ckey, &recv, &part)
	if err != nil || ckey == "" {
		return 0, err
	}
	err = tx.QueryRowContext(ctx, sqlCoalesceOther, rec.Session, rec.Route, ckey, rec.Seq).
		Scan(&oSeq, &oPart, &oRecv, &oNext)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	gone, keep, keepNext, gonePart := rec.Seq, oSeq, next, part
	if oRecv < recv {
		gone, keep, keepNext, gonePart = oSeq, rec.Seq, oNext, oPart
	}
	if _, err := tx.StmtContext(ctx, s.stmts.tombstone).ExecContext(ctx, gone); err != nil {
		return 0, err
	}
	depth[partKey{rec.Session, gonePart}]--
	if _, err := tx.ExecContext(ctx, sqlLaterNext, keepNext, keep); err != nil {
		return 0, err
	}
	return 1, nil
}
