package sqlite

import (
	"context"
	"database/sql"
	"errors"

	"github.com/gobridge/gobridge/stores"
)

// sqlCoalesceOther finds the newest pending record of a coalesce key other
// than the one just released (seq ?4).
const sqlCoalesceOther = `SELECT w.seq, w.part, w.received_at, l.next_at FROM outbox AS w INDEXED BY outbox_coalesce
	CROSS JOIN parts AS p INDEXED BY parts_key ON p.session = w.session AND p.part = w.part
	CROSS JOIN live AS l ON l.k = (p.pid << 43) | w.seq
	WHERE w.state='live' AND w.ckey<>'' AND w.session = ?1 AND w.route = ?2 AND w.ckey = ?3 AND w.seq <> ?4
		AND l.claimed = 0
	ORDER BY w.seq DESC LIMIT 1`

// sqlLaterNext makes a pending record due no earlier than ?1.
const sqlLaterNext = `UPDATE live SET next_at = MAX(next_at, ?1) WHERE k = ?2 AND claimed = 0`

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
	gone, keep, keepNext, gonePart, keepPart := rec.Seq, oSeq, next, part, oPart
	if oRecv < recv {
		gone, keep, keepNext, gonePart, keepPart = oSeq, rec.Seq, oNext, oPart, part
	}
	if err := s.tombstoneLive(ctx, tx, rec.Session, gonePart, gone); err != nil {
		return 0, err
	}
	depth[partKey{rec.Session, gonePart}]--
	pid, err := s.pid(ctx, tx, partKey{rec.Session, keepPart}, false)
	if err != nil {
		return 0, err
	}
	if _, err := tx.ExecContext(ctx, sqlLaterNext, keepNext, liveKey(pid, keep)); err != nil {
		return 0, err
	}
	return 1, nil
}
