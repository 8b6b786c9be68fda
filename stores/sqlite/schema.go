package sqlite

import (
	"context"
	"database/sql"
	"fmt"
)

// migrations are applied in order, each in its own transaction; PRAGMA
// user_version records how many have run. Append new ones; never edit one
// that has shipped.
//
// The hot queries also name their index with INDEXED BY, so that statistics
// (ANALYZE on unrepresentative data) can never turn them into table scans:
// a query whose index cannot be used fails to prepare instead.
//
// Index notes (see DESIGN §9): SQLite uses a partial index only when the
// query repeats its WHERE clause literally, so every query that must use one
// spells out state='pending' (or the other literal) rather than binding it.
var migrations = []string{
	`CREATE TABLE outbox (
		seq              INTEGER PRIMARY KEY AUTOINCREMENT,
		session          TEXT    NOT NULL,
		part             INTEGER NOT NULL,
		route            TEXT    NOT NULL,
		id               TEXT    NOT NULL,
		topic            TEXT    NOT NULL,
		payload          BLOB,
		headers          TEXT,
		qos              INTEGER NOT NULL,
		received_at      INTEGER NOT NULL,
		okey             TEXT    NOT NULL,
		ckey             TEXT    NOT NULL,
		causation_id     TEXT    NOT NULL,
		state            TEXT    NOT NULL,
		attempts         INTEGER NOT NULL,
		first_attempt_at INTEGER NOT NULL,
		next_at          INTEGER NOT NULL,
		last_error       TEXT    NOT NULL,
		created_at       INTEGER NOT NULL,
		expires_at       INTEGER NOT NULL,
		token            INTEGER NOT NULL,
		claim_until      INTEGER NOT NULL,
		dead_at          INTEGER NOT NULL,
		dead_reason      TEXT    NOT NULL
	);
	-- Idempotent Append, in any state (done rows are kept as tombstones).
	CREATE UNIQUE INDEX outbox_key ON outbox(session, route, id);
	-- Claim: due pending rows of one partition in seq order (covering).
	CREATE INDEX outbox_pending ON outbox(session, part, seq, next_at, okey) WHERE state='pending';
	-- Claim: lapsed claims of one partition; Stats: oldest claimed row.
	CREATE INDEX outbox_claimed ON outbox(session, part, seq, claim_until) WHERE state='claimed';
	-- Claim: older live rows of the same ordering key.
	CREATE INDEX outbox_okey ON outbox(session, okey, seq) WHERE state IN ('pending','claimed') AND okey<>'';
	-- Append: the pending row a coalesce key would replace.
	CREATE INDEX outbox_coalesce ON outbox(session, route, ckey, seq) WHERE state='pending' AND ckey<>'';
	-- Dead letters: list oldest first (all, or by route), get by ID.
	CREATE INDEX outbox_dead ON outbox(dead_at, seq) WHERE state='dead';
	CREATE INDEX outbox_dead_route ON outbox(route, dead_at, seq) WHERE state='dead';
	CREATE INDEX outbox_dead_id ON outbox(id, dead_at, seq) WHERE state='dead';
	-- Compaction: oldest done tombstones first.
	CREATE INDEX outbox_done ON outbox(seq) WHERE state='done';

	-- Live (pending or claimed) rows per session partition, kept in the
	-- same transactions as the rows, so exact after a restart.
	CREATE TABLE depth (
		session TEXT    NOT NULL,
		part    INTEGER NOT NULL,
		live    INTEGER NOT NULL,
		PRIMARY KEY (session, part)
	) WITHOUT ROWID;

	CREATE TABLE lease (
		name  TEXT PRIMARY KEY,
		owner TEXT    NOT NULL,
		token INTEGER NOT NULL,
		until INTEGER NOT NULL
	) WITHOUT ROWID;
	-- The last fencing token issued; it only grows.
	CREATE TABLE lease_token (
		id    INTEGER PRIMARY KEY CHECK (id = 1),
		token INTEGER NOT NULL
	);
	INSERT INTO lease_token (id, token) VALUES (1, 0);`,

	// 2: completions per route and minute, for "done in the last hour"
	// (stores.Inspector). Done rows are compacted, so they cannot be counted
	// later; a trigger counts each claimed -> done change in the same
	// transaction (one small upsert per completed row) and forgets minutes
	// older than 61.
	`CREATE TABLE done_count (
		minute  INTEGER NOT NULL,
		session TEXT    NOT NULL,
		route   TEXT    NOT NULL,
		n       INTEGER NOT NULL,
		PRIMARY KEY (minute, session, route)
	) WITHOUT ROWID;
	CREATE TRIGGER outbox_done_count AFTER UPDATE OF state ON outbox
		WHEN OLD.state = 'claimed' AND NEW.state = 'done'
	BEGIN
		INSERT INTO done_count (minute, session, route, n)
			VALUES (CAST(strftime('%s', 'now') AS INTEGER) / 60, NEW.session, NEW.route, 1)
			ON CONFLICT (minute, session, route) DO UPDATE SET n = n + 1;
		DELETE FROM done_count WHERE minute < CAST(strftime('%s', 'now') AS INTEGER) / 60 - 61;
	END;`,

	// 3: Complete counts its done rows itself, one upsert per (session,
	// route) of the call instead of two trigger statements per row (see
	// Complete).
	`DROP TRIGGER outbox_done_count;`,

	// 4: the claim state of live records moves to a narrow table. A claim
	// or a complete used to rewrite the whole outbox row (payload included)
	// and move it between partial indexes; now a claim rewrites one small
	// live row in place (its key does not change) and a complete deletes it.
	// Outbox rows of live records have state 'live' and keep their append-
	// time attempts, next_at and last_error; the live row holds the current
	// ones, which are copied back when the record is dead-lettered.
	`CREATE TABLE live (
		session          TEXT    NOT NULL,
		part             INTEGER NOT NULL,
		seq              INTEGER NOT NULL,
		claimed          INTEGER NOT NULL, -- 0 pending, 1 claimed
		next_at          INTEGER NOT NULL,
		claim_until      INTEGER NOT NULL,
		token            INTEGER NOT NULL,
		attempts         INTEGER NOT NULL,
		first_attempt_at INTEGER NOT NULL,
		last_error       TEXT    NOT NULL,
		okey             TEXT    NOT NULL,
		PRIMARY KEY (session, part, seq)
	) WITHOUT ROWID;
	INSERT INTO live (session, part, seq, claimed, next_at, claim_until, token, attempts, first_attempt_at,
		last_error, okey)
		SELECT session, part, seq, state = 'claimed', next_at, claim_until, token, attempts, first_attempt_at,
			last_error, okey
		FROM outbox WHERE state IN ('pending', 'claimed');
	DROP INDEX outbox_pending;
	DROP INDEX outbox_claimed;
	DROP INDEX outbox_okey;
	DROP INDEX outbox_coalesce;
	UPDATE outbox SET state = 'live' WHERE state IN ('pending', 'claimed');
	-- Claim: older live rows of the same ordering key.
	CREATE INDEX live_okey ON live(session, okey, seq) WHERE okey<>'';
	-- Append: the pending row a coalesce key would replace.
	CREATE INDEX outbox_coalesce ON outbox(session, route, ckey, seq) WHERE state='live' AND ckey<>'';`,

	// 5: a complete deletes the live rows and lists the seqs here instead
	// of rewriting each outbox row as a done tombstone: the outbox row
	// (state still 'live', no live row) is the tombstone, payload included,
	// until compaction deletes it with its entry here.
	`CREATE TABLE completed (seq INTEGER PRIMARY KEY);`,

	// 6: the live table is keyed by integers, (pid, seq), where parts
	// names each session partition's pid: a claim, a complete and their
	// seeks compare two integers per key instead of a text and two
	// integers. The session stays as a column for the ordering-key index.
	`CREATE TABLE parts (
		pid     INTEGER PRIMARY KEY,
		session TEXT    NOT NULL,
		part    INTEGER NOT NULL
	);
	CREATE UNIQUE INDEX parts_key ON parts(session, part);
	INSERT INTO parts (session, part) SELECT DISTINCT session, part FROM live ORDER BY session, part;
	CREATE TABLE live_by_pid (
		pid              INTEGER NOT NULL,
		seq              INTEGER NOT NULL,
		session          TEXT    NOT NULL,
		claimed          INTEGER NOT NULL, -- 0 pending, 1 claimed
		next_at          INTEGER NOT NULL,
		claim_until      INTEGER NOT NULL,
		token            INTEGER NOT NULL,
		attempts         INTEGER NOT NULL,
		first_attempt_at INTEGER NOT NULL,
		last_error       TEXT    NOT NULL,
		okey             TEXT    NOT NULL,
		PRIMARY KEY (pid, seq)
	) WITHOUT ROWID;
	INSERT INTO live_by_pid (pid, seq, session, claimed, next_at, claim_until, token, attempts,
		first_attempt_at, last_error, okey)
		SELECT p.pid, l.seq, l.session, l.claimed, l.next_at, l.claim_until, l.token, l.attempts,
			l.first_attempt_at, l.last_error, l.okey
		FROM live AS l JOIN parts AS p ON p.session = l.session AND p.part = l.part;
	DROP TABLE live;
	ALTER TABLE live_by_pid RENAME TO live;
	-- Claim: older live rows of the same ordering key.
	CREATE INDEX live_okey ON live(session, okey, seq) WHERE okey<>'';`,

	// 7: the live table becomes a rowid table keyed by seq, with (pid,
	// seq) in an index that a claim never changes: marking a claim and
	// ending one are then a one-pass update or delete by rowid (a WITHOUT
	// ROWID update seeks each row three times and sorts the keys twice).
	`CREATE TABLE live_by_seq (
		seq              INTEGER PRIMARY KEY,
		pid              INTEGER NOT NULL,
		session          TEXT    NOT NULL,
		claimed          INTEGER NOT NULL, -- 0 pending, 1 claimed
		next_at          INTEGER NOT NULL,
		claim_until      INTEGER NOT NULL,
		token            INTEGER NOT NULL,
		attempts         INTEGER NOT NULL,
		first_attempt_at INTEGER NOT NULL,
		last_error       TEXT    NOT NULL,
		okey             TEXT    NOT NULL
	);
	INSERT INTO live_by_seq (seq, pid, session, claimed, next_at, claim_until, token, attempts,
		first_attempt_at, last_error, okey)
		SELECT seq, pid, session, claimed, next_at, claim_until, token, attempts, first_attempt_at,
			last_error, okey
		FROM live;
	DROP TABLE live;
	ALTER TABLE live_by_seq RENAME TO live;
	-- Claim: the live rows of a session partition in seq order.
	CREATE INDEX live_pid ON live(pid, seq);
	-- Claim: older live rows of the same ordering key.
	CREATE INDEX live_okey ON live(session, okey, seq) WHERE okey<>'';`,

	// 8: the live table's rowid becomes k = pid<<43 | seq (see liveKey), so
	// that a partition's live rows are one range of the table itself: no
	// (pid, seq) index to maintain on Append and Complete, and a claim
	// walks the table without a lookup per row.
	`CREATE TABLE live_by_k (
		k                INTEGER PRIMARY KEY, -- pid<<43 | seq
		seq              INTEGER NOT NULL,
		session          TEXT    NOT NULL,
		claimed          INTEGER NOT NULL, -- 0 pending, 1 claimed
		next_at          INTEGER NOT NULL,
		claim_until      INTEGER NOT NULL,
		token            INTEGER NOT NULL,
		attempts         INTEGER NOT NULL,
		first_attempt_at INTEGER NOT NULL,
		last_error       TEXT    NOT NULL,
		okey             TEXT    NOT NULL
	);
	INSERT INTO live_by_k (k, seq, session, claimed, next_at, claim_until, token, attempts,
		first_attempt_at, last_error, okey)
		SELECT (pid << 43) | seq, seq, session, claimed, next_at, claim_until, token, attempts,
			first_attempt_at, last_error, okey
		FROM live;
	DROP TABLE live;
	ALTER TABLE live_by_k RENAME TO live;
	-- Claim: older live rows of the same ordering key.
	CREATE INDEX live_okey ON live(session, okey, seq) WHERE okey<>'';`,
}

// migrate brings the schema up to date.
func migrate(ctx context.Context, db *sql.DB) error {
	var version int
	if err := db.QueryRowContext(ctx, `PRAGMA user_version`).Scan(&version); err != nil {
		return fmt.Errorf("read schema version: %w", err)
	}
	if version > len(migrations) {
		return fmt.Errorf("schema version %d is newer than this gobridge (%d)", version, len(migrations))
	}
	for i := version; i < len(migrations); i++ {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return fmt.Errorf("migrate to %d: %w", i+1, err)
		}
		if _, err := tx.ExecContext(ctx, migrations[i]); err != nil {
			_ = tx.Rollback()
			return fmt.Errorf("migrate to %d: %w", i+1, err)
		}
		if _, err := tx.ExecContext(ctx, fmt.Sprintf(`PRAGMA user_version = %d`, i+1)); err != nil {
			_ = tx.Rollback()
			return fmt.Errorf("migrate to %d: %w", i+1, err)
		}
		if err := tx.Commit(); err != nil {
			return fmt.Errorf("migrate to %d: %w", i+1, err)
		}
	}
	return nil
}
