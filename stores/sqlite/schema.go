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

	// 4: the claim state of live (pending or claimed) records lives in a
	// narrow table, so that a claim rewrites one small row in place and a
	// complete deletes it, instead of rewriting the whole outbox row
	// (payload included) and moving it between partial indexes twice.
	//
	// parts numbers each session partition (pid). A live row's rowid is
	// k = pid<<43 | seq (see liveKey): a partition's live rows are one range
	// of the table itself, so a claim walks that range without an index and
	// Append and Complete maintain none. Outbox rows of live records have
	// state 'live' and keep their append-time attempts, next_at and
	// last_error; the live row holds the current ones, copied back when the
	// record is dead-lettered.
	//
	// A complete deletes the live rows and lists the seqs in completed: the
	// outbox row (state still 'live', no live row) is the done tombstone,
	// payload included, until compaction deletes it with its entry there.
	`CREATE TABLE parts (
		pid     INTEGER PRIMARY KEY,
		session TEXT    NOT NULL,
		part    INTEGER NOT NULL
	);
	CREATE UNIQUE INDEX parts_key ON parts(session, part);
	INSERT INTO parts (session, part)
		SELECT DISTINCT session, part FROM outbox WHERE state IN ('pending', 'claimed') ORDER BY session, part;
	CREATE TABLE live (
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
	INSERT INTO live (k, seq, session, claimed, next_at, claim_until, token, attempts, first_attempt_at,
		last_error, okey)
		SELECT (p.pid << 43) | o.seq, o.seq, o.session, o.state = 'claimed', o.next_at, o.claim_until, o.token,
			o.attempts, o.first_attempt_at, o.last_error, o.okey
		FROM outbox AS o JOIN parts AS p ON p.session = o.session AND p.part = o.part
		WHERE o.state IN ('pending', 'claimed');
	-- Claim: older live rows of the same ordering key.
	CREATE INDEX live_okey ON live(session, okey, seq) WHERE okey<>'';
	CREATE TABLE completed (seq INTEGER PRIMARY KEY);
	DROP INDEX outbox_pending;
	DROP INDEX outbox_claimed;
	DROP INDEX outbox_okey;
	DROP INDEX outbox_coalesce;
	UPDATE outbox SET state = 'live' WHERE state IN ('pending', 'claimed');
	-- Append: the pending row a coalesce key would replace.
	CREATE INDEX outbox_coalesce ON outbox(session, route, ckey, seq) WHERE state='live' AND ckey<>'';`,
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
