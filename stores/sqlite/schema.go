package sqlite

import (
	"cmp"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gobridge/gobridge/stores"
)

// schemaVersion is PRAGMA user_version of this layout; 1 to 6 were the
// layouts before it, which nothing reads any more.
const schemaVersion = 7

const schema = `
CREATE TABLE outbox (
	seq         INTEGER PRIMARY KEY,
	session     TEXT    NOT NULL,
	part        INTEGER NOT NULL,
	route       TEXT    NOT NULL,
	id          TEXT    NOT NULL,
	state       INTEGER NOT NULL, -- 0 live, 1 dead, 2 tombstone
	token       INTEGER NOT NULL, -- claim token of a live record, 0 unclaimed
	tomb        INTEGER NOT NULL DEFAULT 0, -- the Write that made the tombstone, oldest first
	size        INTEGER NOT NULL, -- stores.Record.Size
	created_at  INTEGER NOT NULL, -- times are Unix nanoseconds, 0 for none
	ckey        TEXT    NOT NULL,
	received_at INTEGER NOT NULL,
	topic       TEXT    NOT NULL,
	payload     BLOB,
	headers     TEXT,             -- JSON object
	qos         INTEGER NOT NULL,
	okey        TEXT    NOT NULL,
	causation   TEXT    NOT NULL,
	raw         INTEGER NOT NULL,
	truncated   INTEGER NOT NULL,
	expires_at  INTEGER NOT NULL,
	attempts    INTEGER NOT NULL,
	first_at    INTEGER NOT NULL,
	next_at     INTEGER NOT NULL,
	last_error  TEXT    NOT NULL,
	dead_at     INTEGER NOT NULL,
	dead_reason TEXT    NOT NULL
);
-- SQLite uses a partial index only when the query repeats its predicate
-- literally (DESIGN §9): every query below spells out state=0, 1 or 2.
CREATE UNIQUE INDEX outbox_key ON outbox (id, route, session);
CREATE INDEX outbox_claim ON outbox (session, part, seq) WHERE state=0;
CREATE INDEX outbox_age ON outbox (session, created_at) WHERE state=0;
CREATE INDEX outbox_coalesce ON outbox (session, route, ckey) WHERE state=0 AND token=0 AND ckey<>'';
CREATE INDEX outbox_dead ON outbox (dead_at, seq) WHERE state=1;
CREATE INDEX outbox_dead_route ON outbox (route, dead_at, seq) WHERE state=1;
CREATE INDEX outbox_tomb ON outbox (tomb) WHERE state=2;
-- The live and dead records and live bytes of each session and route,
-- kept by Write in the transaction that changes them (only inserts and
-- changes of state move them: tombstones are deleted, never records).
CREATE TABLE counts (
	session TEXT    NOT NULL,
	route   TEXT    NOT NULL,
	live    INTEGER NOT NULL,
	dead    INTEGER NOT NULL,
	bytes   INTEGER NOT NULL,
	PRIMARY KEY (session, route)
) WITHOUT ROWID;
CREATE TABLE lease (
	name  TEXT PRIMARY KEY,
	owner TEXT    NOT NULL,
	token INTEGER NOT NULL,
	until INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE meta (
	id    INTEGER PRIMARY KEY CHECK (id = 1),
	token INTEGER NOT NULL, -- the last fencing token issued
	seq   INTEGER NOT NULL, -- the last Seq given
	epoch INTEGER NOT NULL  -- how many times an owner opened the file
);
INSERT INTO meta VALUES (1, 0, 0, 0);`

// nanos stores a time as Unix nanoseconds (0 for the zero time), clamped to
// what an int64 holds.
func nanos(t time.Time) int64 {
	switch {
	case t.IsZero():
		return 0
	case t.Year() < 1678:
		return math.MinInt64 + 1
	case t.Year() > 2261:
		return math.MaxInt64
	}
	return t.UnixNano()
}

func fromNanos(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}

// columns are what scanRecord reads and, with size, what Write inserts.
// scanRecord takes an integer for payload as its length (PayloadLen).
const columns = `seq, session, part, route, id, state, token, created_at, ckey, received_at, topic, payload,
	headers, qos, okey, causation, raw, truncated, expires_at, attempts, first_at, next_at, last_error, dead_at, dead_reason`

func scanRecord(rows *sql.Rows) (stores.Record, error) {
	var (
		r                                               stores.Record
		headers                                         sql.NullString
		payload                                         any
		state                                           int
		created, received, expires, first, next, deadAt int64
	)
	err := rows.Scan(&r.Seq, &r.Session, &r.Partition, &r.Route, &r.Envelope.ID, &state, &r.Token, &created,
		&r.CoalesceKey, &received, &r.Envelope.Topic, &payload, &headers, &r.Envelope.QoS,
		&r.Envelope.Key, &r.CausationID, &r.Raw, &r.Truncated, &expires, &r.Attempts, &first, &next,
		&r.LastError, &deadAt, &r.DeadReason)
	if err != nil {
		return r, err
	}
	switch p := payload.(type) {
	case []byte:
		r.Envelope.Payload = p
	case int64:
		r.PayloadLen = int(p)
	}
	if headers.Valid {
		if r.Envelope.Headers, err = decodeHeaders(headers.String); err != nil {
			return r, fmt.Errorf("decode headers of %s: %w", r.Envelope.ID, err)
		}
	}
	r.State = stores.Live
	if state == 1 {
		r.State = stores.Dead
	}
	r.CreatedAt, r.Envelope.ReceivedAt, r.ExpiresAt = fromNanos(created), fromNanos(received), fromNanos(expires)
	r.FirstAttemptAt, r.NextAttemptAt, r.DeadAt = fromNanos(first), fromNanos(next), fromNanos(deadAt)
	return r, nil
}

// encodeHeaders is the headers column of h: a JSON object, or, when a name
// or value is not UTF-8 (which JSON would turn into U+FFFD: an HTTP ingest
// header may hold any byte), a JSON array of name, value, ... in base64.
// NULL for no headers.
func encodeHeaders(h map[string]string) (any, error) {
	if len(h) == 0 {
		return nil, nil
	}
	var pairs [][]byte
	for k, v := range h {
		pairs = append(pairs, []byte(k), []byte(v))
	}
	var b []byte
	var err error
	if slices.ContainsFunc(pairs, func(p []byte) bool { return !utf8.Valid(p) }) {
		b, err = json.Marshal(pairs)
	} else {
		b, err = json.Marshal(h)
	}
	return string(b), err
}

// decodeHeaders reads what encodeHeaders wrote.
func decodeHeaders(s string) (map[string]string, error) {
	if !strings.HasPrefix(s, "[") {
		var h map[string]string
		return h, json.Unmarshal([]byte(s), &h)
	}
	var pairs [][]byte
	if err := json.Unmarshal([]byte(s), &pairs); err != nil || len(pairs)%2 != 0 {
		return nil, cmp.Or(err, errors.New("an odd number of names and values"))
	}
	h := make(map[string]string, len(pairs)/2)
	for i := 0; i < len(pairs); i += 2 {
		h[string(pairs[i])] = string(pairs[i+1])
	}
	return h, nil
}
