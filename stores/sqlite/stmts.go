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
	insert, exists, coalesceFind, tombstone, depthAdd *sql.Stmt
	// insertSame[i] and insertMixed[i] insert 1<<i rows (up to
	// insertChunk); the latter returns the session and partition of each
	// new row, for rows of several partitions.
	insertSame, insertMixed              [insertSizes]*sql.Stmt
	liveOne, liveDelete, pidFind, pidAdd *sql.Stmt
	// liveSweep[join][loose]: see sqlLiveSweep.
	liveSweep                                                       [2][2]*sql.Stmt
	claim, claimMark                                                *sql.Stmt
	completeLive, completeCheck, completeDone, doneCount, donePrune *sql.Stmt
	release, deadLive, dead                                         *sql.Stmt
	deadByID                                                        *sql.Stmt

	depthRows, oldestLive            *sql.Stmt
	listDead, listDeadRoute, getDead *sql.Stmt
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
	insertSizes = 6 // 1, 2, 4, …, insertChunk rows

	sqlExists = `SELECT 1 FROM outbox WHERE session = ? AND route = ? AND id = ?`

	// sqlLiveSweep gives the live outbox rows above seq ?1, all of
	// session partition pid ?2, their live (claim state) rows, in one
	// statement per Append; sqlLiveSweepJoin does it for rows of several
	// partitions, and sqlLiveOne for the row seq ?1 of pid ?2.
	sqlLiveSweep = `INSERT INTO live (k, seq, session, claimed, next_at, claim_until, token, attempts,
			first_attempt_at, last_error, okey)
		SELECT (?2 << 43) | seq, seq, session, 0, next_at, 0, 0, attempts, first_attempt_at, last_error, okey
		FROM outbox WHERE ` + sweepWhere + `
		ON CONFLICT DO NOTHING`
	sqlLiveSweepJoin = `INSERT INTO live (k, seq, session, claimed, next_at, claim_until, token, attempts,
			first_attempt_at, last_error, okey)
		SELECT (p.pid << 43) | o.seq, o.seq, o.session, 0, o.next_at, 0, 0, o.attempts, o.first_attempt_at,
			o.last_error, o.okey
		FROM outbox AS o CROSS JOIN parts AS p INDEXED BY parts_key ON p.session = o.session AND p.part = o.part
		WHERE ` + sweepWhereJoin + `
		ON CONFLICT DO NOTHING`

	// Append knows the seqs it added exactly (?1 is the one before the
	// first) unless a statement skipped a row as a duplicate, which still
	// uses up a seq; then ?1 is lower, and the loose variants skip the
	// completed records the range may include (their outbox rows are
	// 'live' too; the other live rows have their live rows already).
	sweepWhere     = `seq > ?1 AND state='live'`
	sweepWhereJoin = `o.seq > ?1 AND o.state='live'`
	sweepLoose     = ` AND NOT EXISTS (SELECT 1 FROM completed WHERE completed.seq = outbox.seq)`
	sweepLooseJoin = ` AND NOT EXISTS (SELECT 1 FROM completed WHERE completed.seq = o.seq)`
	sqlLiveOne     = `INSERT INTO live (k, seq, session, claimed, next_at, claim_until, token, attempts,
			first_attempt_at, last_error, okey)
		SELECT (?2 << 43) | seq, seq, session, 0, next_at, 0, 0, attempts, first_attempt_at, last_error, okey
		FROM outbox WHERE seq = ?1 AND state='live'
		ON CONFLICT DO NOTHING`

	// sqlPidFind and sqlPidAdd read and add a session partition's pid.
	sqlPidFind = `SELECT pid FROM parts INDEXED BY parts_key WHERE session = ? AND part = ?`
	sqlPidAdd  = `INSERT INTO parts (session, part) VALUES (?, ?) RETURNING pid`

	sqlCoalesceFind = `SELECT w.seq, w.part, w.received_at, l.next_at FROM outbox AS w INDEXED BY outbox_coalesce
		CROSS JOIN parts AS p INDEXED BY parts_key ON p.session = w.session AND p.part = w.part
		CROSS JOIN live AS l ON l.k = (p.pid << 43) | w.seq
		WHERE w.state='live' AND w.ckey<>'' AND w.session = ?1 AND w.route = ?2 AND w.ckey = ?3 AND l.claimed = 0
		ORDER BY w.seq DESC LIMIT 1`

	// sqlTombstone makes an outbox row a payload-less done tombstone; a
	// live one also loses its live row (sqlLiveDelete).
	sqlTombstone  = `UPDATE outbox SET state='done', payload=NULL, headers=NULL WHERE seq = ?`
	sqlLiveDelete = `DELETE FROM live WHERE k = ?`

	sqlDepthAdd = `INSERT INTO depth (session, part, live) VALUES (?, ?, ?)
		ON CONFLICT (session, part) DO UPDATE SET live = live + excluded.live`

	// sqlClaim reads the first ?4 claimable live rows of a partition (live
	// keys from ?1 to ?2) in
	// seq order (due pending rows and lapsed claims alike) with their
	// outbox columns, skipping records held back by an older live record of
	// their ordering key; sqlClaimMark then claims them in place. The live
	// table's key is pid<<43 | seq, so the walk starts at the head of the
	// partition whatever the backlog behind it.
	sqlClaim = `SELECT o.seq, o.attempts, o.first_attempt_at, o.next_at, w.route, w.id, w.topic, w.payload,
			w.qos, w.received_at, w.created_at,
			CASE WHEN w.headers IS NULL AND o.last_error = '' AND o.okey = '' AND w.ckey = ''
				AND w.causation_id = '' AND w.expires_at = 0 THEN NULL
				ELSE json_array(w.headers, o.last_error, o.okey, w.ckey, w.causation_id, w.expires_at) END
		FROM live AS o CROSS JOIN outbox AS w ON w.seq = o.seq
		WHERE o.k >= ?1 AND o.k < ?2
			AND (CASE o.claimed WHEN 0 THEN o.next_at ELSE o.claim_until END) <= ?3
			AND (o.okey = '' OR NOT EXISTS (SELECT 1 FROM live AS b INDEXED BY live_okey
				WHERE b.okey<>'' AND b.session = o.session AND b.okey = o.okey AND b.seq < o.seq
				AND (CASE b.claimed WHEN 0 THEN b.next_at ELSE b.claim_until END) > ?3))
		ORDER BY o.k LIMIT ?4`

	sqlClaimMark = `UPDATE live SET claimed = 1, token = ?1, claim_until = ?2, attempts = attempts + 1,
			first_attempt_at = CASE first_attempt_at WHEN 0 THEN ?3 ELSE first_attempt_at END
		WHERE k IN (SELECT value FROM json_each(?4))`

	// sqlCompleteLive ends the claims of one token (their live keys come as
	// a JSON array). sqlCompleteCheck returns the envelope ID
	// and route of the outbox rows of a JSON array of seqs, one line each
	// in no set order, for Complete to check against its records;
	// sqlCompleteDone lists the seqs in completed. The outbox rows are not
	// rewritten.
	sqlCompleteLive = `DELETE FROM live
		WHERE k IN (SELECT value FROM json_each(?1)) AND claimed = 1 AND token = ?2`
	sqlCompleteCheck = `SELECT group_concat(o.id || ' ' || o.route, char(10))
		FROM json_each(?1) CROSS JOIN outbox AS o ON o.seq = json_each.value`
	sqlCompleteDone = `INSERT INTO completed (seq) SELECT value FROM json_each(?1)`

	// sqlDoneCount adds n completions of a route to a minute; sqlDonePrune
	// forgets minutes older than the hour the Inspector reports.
	sqlDoneCountAdd = `INSERT INTO done_count (minute, session, route, n) VALUES (?, ?, ?, ?)
		ON CONFLICT (minute, session, route) DO UPDATE SET n = n + excluded.n`
	sqlDonePrune = `DELETE FROM done_count WHERE minute < ?`

	sqlRelease = `UPDATE live SET claimed = 0, next_at = ?1, last_error = ?2
		WHERE k = ?3 AND claimed = 1 AND token = ?4
		AND EXISTS (SELECT 1 FROM outbox WHERE seq = ?5 AND id = ?6)`

	// sqlDeadLive ends a claim for a dead letter, returning the claim state
	// that sqlDead copies to the outbox row.
	sqlDeadLive = `DELETE FROM live WHERE k = ? AND claimed = 1 AND token = ?
		RETURNING attempts, first_attempt_at, next_at, last_error, claim_until`
	sqlDead = `UPDATE outbox SET state='dead', dead_at = ?, dead_reason = ?, attempts = ?, first_attempt_at = ?,
			next_at = ?, last_error = ?, token = ?, claim_until = ?
		WHERE seq = ? AND id = ? AND state='live'`

	sqlGetDead = `SELECT ` + columns + ` FROM outbox WHERE state='dead' AND id = ? ORDER BY dead_at, seq LIMIT 1`

	sqlDepthRows = `SELECT part, live FROM depth WHERE session = ? AND live > 0`

	// sqlOldestLive is the first live (pending or claimed) record of a
	// partition by seq.
	sqlOldestLive = `SELECT l.seq, w.created_at FROM parts AS p INDEXED BY parts_key
		CROSS JOIN live AS l ON l.k >= p.pid << 43 AND l.k < (p.pid + 1) << 43
		CROSS JOIN outbox AS w ON w.seq = l.seq
		WHERE p.session = ? AND p.part = ? ORDER BY l.k LIMIT 1`

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
	return head + "VALUES " + strings.Join(rows, ", ") + "\n" + conflict + " RETURNING session, part, seq"
}

func (s *Store) prepare(ctx context.Context) error {
	for _, p := range []struct {
		db  *sql.DB
		dst **sql.Stmt
		sql string
	}{
		{s.w, &s.stmts.insert, sqlInsert},
		{s.w, &s.stmts.exists, sqlExists},
		{s.w, &s.stmts.liveSweep[0][0], sqlLiveSweep},
		{s.w, &s.stmts.liveSweep[0][1], strings.Replace(sqlLiveSweep, sweepWhere, sweepWhere+sweepLoose, 1)},
		{s.w, &s.stmts.liveSweep[1][0], sqlLiveSweepJoin},
		{s.w, &s.stmts.liveSweep[1][1], strings.Replace(sqlLiveSweepJoin, sweepWhereJoin, sweepWhereJoin+sweepLooseJoin, 1)},
		{s.w, &s.stmts.pidFind, sqlPidFind},
		{s.w, &s.stmts.pidAdd, sqlPidAdd},
		{s.w, &s.stmts.liveOne, sqlLiveOne},
		{s.w, &s.stmts.liveDelete, sqlLiveDelete},
		{s.w, &s.stmts.coalesceFind, sqlCoalesceFind},
		{s.w, &s.stmts.tombstone, sqlTombstone},
		{s.w, &s.stmts.depthAdd, sqlDepthAdd},
		{s.w, &s.stmts.claim, sqlClaim},
		{s.w, &s.stmts.claimMark, sqlClaimMark},
		{s.w, &s.stmts.completeLive, sqlCompleteLive},
		{s.w, &s.stmts.completeCheck, sqlCompleteCheck},
		{s.w, &s.stmts.completeDone, sqlCompleteDone},
		{s.w, &s.stmts.doneCount, sqlDoneCountAdd},
		{s.w, &s.stmts.donePrune, sqlDonePrune},
		{s.w, &s.stmts.release, sqlRelease},
		{s.w, &s.stmts.deadLive, sqlDeadLive},
		{s.w, &s.stmts.dead, sqlDead},
		{s.w, &s.stmts.deadByID, sqlGetDead},
		{s.r, &s.stmts.depthRows, sqlDepthRows},
		{s.r, &s.stmts.oldestLive, sqlOldestLive},
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
	for i := range insertSizes {
		mixed := sqlInsertRows(1 << i)
		for dst, q := range map[**sql.Stmt]string{
			&s.stmts.insertSame[i]:  strings.TrimSuffix(mixed, " RETURNING session, part, seq"),
			&s.stmts.insertMixed[i]: mixed,
		} {
			st, err := s.w.PrepareContext(ctx, q)
			if err != nil {
				return fmt.Errorf("prepare %q: %w", q, err)
			}
			*dst = st
		}
	}
	return nil
}

func (st *stmts) close() {
	for _, s := range append(append([]*sql.Stmt{st.insert, st.exists, st.liveSweep[0][0], st.liveSweep[0][1],
		st.liveSweep[1][0], st.liveSweep[1][1], st.pidFind, st.pidAdd,
		st.liveOne, st.liveDelete, st.coalesceFind, st.tombstone, st.depthAdd, st.claim, st.claimMark,
		st.completeLive, st.completeCheck, st.completeDone, st.doneCount, st.donePrune, st.release, st.deadLive, st.dead, st.deadByID,
		st.depthRows, st.oldestLive, st.listDead, st.listDeadRoute, st.getDead}, st.insertSame[:]...), st.insertMixed[:]...) {
		if s != nil {
			_ = s.Close()
		}
	}
}
