package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
)

// stmts are the prepared statements of a Store. Writer statements are
// prepared on the single writer connection and bound into transactions with
// tx.StmtContext; reader statements are prepared on the read pool.
type stmts struct {
	insert, insertChunk, insertChunkN, exists, coalesceFind, tombstone, depthAdd *sql.Stmt
	resetLapsed, claim                                                           *sql.Stmt
	complete, doneCount, donePrune, release, dead                                *sql.Stmt
	deadByID                                                                     *sql.Stmt

	depthRows, oldestPending, oldestClaimed *sql.Stmt
	listDead, listDeadRoute, getDead        *sql.Stmt
}

const (
	sqlInsert = `INSERT INTO outbox (session, part, route, id, topic, payload, headers, qos, received_at,
		okey, ckey, causation_id, state, attempts, first_attempt_at, next_at, last_error, created_at,
		expires_at, token, claim_until, dead_at, dead_reason)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0, 0, 0, '')
		ON CONFLICT (session, route, id) DO NOTHING`

	// insertChunk rows go in one statement; RETURNING names the rows that
	// were new (ON CONFLICT DO NOTHING returns nothing for the others).
	insertChunk = 32

	sqlExists = `SELECT 1 FROM outbox WHERE session = ? AND route = ? AND id = ?`

	sqlCoalesceFind = `SELECT seq, part, received_at, next_at FROM outbox INDEXED BY outbox_coalesce
		WHERE state='pending' AND ckey<>'' AND session = ? AND route = ? AND ckey = ?
		ORDER BY seq DESC LIMIT 1`

	sqlTombstone = `UPDATE outbox SET state='done', payload=NULL, headers=NULL WHERE seq = ?`

	sqlDepthAdd = `INSERT INTO depth (session, part, live) VALUES (?, ?, ?)
		ON CONFLICT (session, part) DO UPDATE SET live = live + excluded.live`

	// sqlResetLapsed returns lapsed claims of one partition to pending, so
	// that the claim below sees them through the pending index.
	sqlResetLapsed = `UPDATE outbox SET state='pending'
		WHERE seq IN (SELECT seq FROM outbox INDEXED BY outbox_claimed
			WHERE state='claimed' AND session = ?1 AND part = ?2 AND claim_until <= ?3)`

	// sqlClaim is the claim: one statement over the pending partial index
	// (its predicate repeated literally), in seq order, skipping records
	// held back by an older live record of their ordering key.
	sqlClaim = `UPDATE outbox SET state='claimed', token = ?1, claim_until = ?2, attempts = attempts + 1,
			first_attempt_at = CASE first_attempt_at WHEN 0 THEN ?3 ELSE first_attempt_at END
		WHERE seq IN (SELECT o.seq FROM outbox AS o INDEXED BY outbox_pending
			WHERE o.state='pending' AND o.session = ?4 AND o.part = ?5 AND o.next_at <= ?3
			AND (o.okey = '' OR NOT EXISTS (SELECT 1 FROM outbox AS b INDEXED BY outbox_okey
				WHERE b.state IN ('pending','claimed') AND b.okey<>''
				AND b.session = o.session AND b.okey = o.okey AND b.seq < o.seq
				AND ((b.state = 'pending' AND b.next_at > ?3) OR (b.state = 'claimed' AND b.claim_until > ?3))))
			ORDER BY o.seq LIMIT ?6)
		RETURNING ` + claimColumns

	// sqlComplete settles the records of one token in one statement; the
	// seqs come as a JSON array.
	sqlComplete = `UPDATE outbox NOT INDEXED SET state='done', payload=NULL, headers=NULL
		WHERE seq IN (SELECT value FROM json_each(?1)) AND state='claimed' AND token = ?2
		RETURNING seq, id, session, part, route`

	// sqlDoneCount adds n completions of a route to a minute; sqlDonePrune
	// forgets minutes older than the hour the Inspector reports.
	sqlDoneCountAdd = `INSERT INTO done_count (minute, session, route, n) VALUES (?, ?, ?, ?)
		ON CONFLICT (minute, session, route) DO UPDATE SET n = n + excluded.n`
	sqlDonePrune = `DELETE FROM done_count WHERE minute < ?`

	sqlRelease = `UPDATE outbox SET state='pending', next_at = ?, last_error = ?
		WHERE seq = ? AND id = ? AND state='claimed' AND token = ?`

	sqlDead = `UPDATE outbox SET state='dead', dead_at = ?, dead_reason = ?
		WHERE seq = ? AND id = ? AND state='claimed' AND token = ? RETURNING session, part`

	sqlGetDead = `SELECT ` + columns + ` FROM outbox WHERE state='dead' AND id = ? ORDER BY dead_at, seq LIMIT 1`

	sqlDepthRows = `SELECT part, live FROM depth WHERE session = ? AND live > 0`

	sqlOldestPending = `SELECT seq, created_at FROM outbox INDEXED BY outbox_pending WHERE state='pending' AND session = ? AND part = ?
		ORDER BY seq LIMIT 1`

	sqlOldestClaimed = `SELECT seq, created_at FROM outbox INDEXED BY outbox_claimed WHERE state='claimed' AND session = ? AND part = ?
		ORDER BY seq LIMIT 1`

	sqlListDead = `SELECT ` + columns + ` FROM outbox WHERE state='dead' AND (dead_at, seq) > (?, ?)
		ORDER BY dead_at, seq LIMIT ?`

	sqlListDeadRoute = `SELECT ` + columns + ` FROM outbox WHERE state='dead' AND route = ? AND (dead_at, seq) > (?, ?)
		ORDER BY dead_at, seq LIMIT ?`
)

// sqlInsertRows is sqlInsert for n rows at once, returning the new ones.
func sqlInsertRows(n int) string {
	head, tail, _ := strings.Cut(sqlInsert, "VALUES (")
	row, conflict, _ := strings.Cut(tail, ")\n")
	rows := make([]string, n)
	for i := range rows {
		rows[i] = "(" + row + ")"
	}
	return head + "VALUES " + strings.Join(rows, ", ") + "\n" + conflict + " RETURNING session, part"
}

func (s *Store) prepare(ctx context.Context) error {
	for _, p := range []struct {
		db  *sql.DB
		dst **sql.Stmt
		sql string
	}{
		{s.w, &s.stmts.insert, sqlInsert},
		{s.w, &s.stmts.insertChunk, sqlInsertRows(insertChunk)},
		{s.w, &s.stmts.insertChunkN, strings.TrimSuffix(sqlInsertRows(insertChunk), " RETURNING session, part")},
		{s.w, &s.stmts.exists, sqlExists},
		{s.w, &s.stmts.coalesceFind, sqlCoalesceFind},
		{s.w, &s.stmts.tombstone, sqlTombstone},
		{s.w, &s.stmts.depthAdd, sqlDepthAdd},
		{s.w, &s.stmts.resetLapsed, sqlResetLapsed},
		{s.w, &s.stmts.claim, sqlClaim},
		{s.w, &s.stmts.complete, sqlComplete},
		{s.w, &s.stmts.doneCount, sqlDoneCountAdd},
		{s.w, &s.stmts.donePrune, sqlDonePrune},
		{s.w, &s.stmts.release, sqlRelease},
		{s.w, &s.stmts.dead, sqlDead},
		{s.w, &s.stmts.deadByID, sqlGetDead},
		{s.r, &s.stmts.depthRows, sqlDepthRows},
		{s.r, &s.stmts.oldestPending, sqlOldestPending},
		{s.r, &s.stmts.oldestClaimed, sqlOldestClaimed},
		{s.r, &s.stmts.listDead, sqlListDead},
		{s.r, &s.stmts.listDeadRoute, sqlListDeadRoute},
		{s.r, &s.stmts.getDead, sqlGetDead},
	} {
		st, err := p.db.PrepareContext(ctx, p.sql)
		if err != nil {
			return fmt.Errorf("prepare %q: %w", p.sql, err)
		}
		*p.dst = st
	}
	return nil
}

func (st *stmts) close() {
	for _, s := range []*sql.Stmt{st.insert, st.insertChunk, st.insertChunkN, st.exists, st.coalesceFind, st.tombstone, st.depthAdd,
		st.resetLapsed, st.claim, st.complete, st.doneCount, st.donePrune, st.release, st.dead, st.deadByID,
		st.depthRows, st.oldestPending, st.oldestClaimed, st.listDead, st.listDeadRoute, st.getDead} {
		if s != nil {
			_ = s.Close()
		}
	}
}
