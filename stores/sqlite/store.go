// Package sqlite is the single-node durable backend of the stores contracts:
// one SQLite file (modernc.org/sqlite, pure Go, WAL) holds the outbox, its
// dead letters, the per-session depth counters and the lease table. *Store
// implements stores.Store; its Leases method (or OpenLeases) gives the
// stores.Leases of the same file.
//
// Writes go through one connection (SQLite allows one writer at a time) in
// BEGIN IMMEDIATE transactions; each Append call is one transaction and one
// durable commit, so callers group-commit by passing many records at once.
// Reads that do not change state (Stats, dead-letter listing) use a separate
// pool of read-only connections and never wait for a write.
package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	sqlite "modernc.org/sqlite"

	"github.com/gobridge/gobridge/stores"
)

// Interface guards.
var (
	_ stores.Store  = (*Store)(nil)
	_ stores.Leases = (*Leases)(nil)
)

// DefaultDoneRetention is how many done tombstones a store keeps by default.
const DefaultDoneRetention = 100_000

// Options tunes a Store.
type Options struct {
	// Sync is the durability of a commit: "full" (default) fsyncs the WAL on
	// every commit, so a committed Append survives a power loss; "normal"
	// fsyncs only at checkpoints, so a power loss (not a process crash) may
	// lose the last commits. Both are safe against kill -9.
	Sync string
	// BusyTimeout is how long a connection waits for a lock held by
	// another process before failing. Defaults to 5s.
	BusyTimeout time.Duration
	// DoneRetention is how many done records (delivered, dropped, requeued
	// or coalesced away) are kept as tombstones so that re-appending them
	// is a no-op; older ones are deleted in batches. A delivered record's
	// tombstone is its outbox row as it was, payload included (the others
	// lose theirs). Defaults to DefaultDoneRetention; negative keeps none.
	DoneRetention int
	// ReadConns is the size of the read-only pool. Defaults to 4.
	ReadConns int
	// CacheKiB is SQLite's page cache per connection, in KiB. Defaults to
	// 32768 (32 MiB); SQLite's own default of 2 MiB makes claims slower as
	// the backlog grows.
	CacheKiB int
}

// Store is a SQLite outbox, dead-letter store and lease table. It is safe
// for concurrent use; writes are serialised on one connection.
type Store struct {
	path string
	opts Options
	w    *sql.DB // one connection, BEGIN IMMEDIATE
	r    *sql.DB // read-only pool

	stmts stmts

	// liveLater are the seqs of the pending rows that insertRow added in
	// the running write transaction; only writeTx's fn touches it, and
	// write transactions run one at a time on the single writer
	// connection.
	liveLater []liveRow
	pids      pids
	pidMu     sync.RWMutex

	doneCount  atomic.Int64 // done tombstones in the table
	donePruned atomic.Int64 // the minute done_count was last pruned in
	compactMu  sync.Mutex

	closeOnce sync.Once
	closeErr  error
}

// Open opens (creating it and its directory if needed) the store at path and
// brings its schema up to date.
func Open(path string, opts Options) (*Store, error) {
	switch opts.Sync {
	case "":
		opts.Sync = "full"
	case "full", "normal":
	default:
		return nil, fmt.Errorf("open sqlite store: %w: sync %q is not full or normal", stores.ErrInvalid, opts.Sync)
	}
	if opts.BusyTimeout <= 0 {
		opts.BusyTimeout = 5 * time.Second
	}
	if opts.DoneRetention == 0 {
		opts.DoneRetention = DefaultDoneRetention
	}
	if opts.ReadConns <= 0 {
		opts.ReadConns = 4
	}
	if opts.CacheKiB <= 0 {
		opts.CacheKiB = 32768
	}
	s := &Store{path: path, opts: opts, pids: pids{committed: map[partKey]int64{}, added: map[partKey]int64{}}}
	ctx := context.Background()
	if err := createPrivate(path); err != nil {
		return nil, fmt.Errorf("open sqlite store %s: %w", path, err)
	}
	var err error
	if s.w, err = sql.Open("sqlite", s.dsn(false)); err != nil {
		return nil, fmt.Errorf("open sqlite store %s: %w", path, err)
	}
	s.w.SetMaxOpenConns(1)
	s.w.SetMaxIdleConns(1)
	s.w.SetConnMaxLifetime(0)
	s.w.SetConnMaxIdleTime(0)
	if err := migrate(ctx, s.w); err != nil {
		_ = s.w.Close()
		return nil, fmt.Errorf("open sqlite store %s: %w", path, mapErr(err))
	}
	if s.r, err = sql.Open("sqlite", s.dsn(true)); err != nil {
		_ = s.w.Close()
		return nil, fmt.Errorf("open sqlite store %s: %w", path, err)
	}
	s.r.SetMaxOpenConns(opts.ReadConns)
	s.r.SetMaxIdleConns(opts.ReadConns)
	if err := s.prepare(ctx); err != nil {
		_ = s.Close()
		return nil, fmt.Errorf("open sqlite store %s: %w", path, mapErr(err))
	}
	var done int64
	if err := s.w.QueryRowContext(ctx, `SELECT (SELECT count(*) FROM completed) + (SELECT count(*) FROM outbox WHERE state='done')`).Scan(&done); err != nil {
		_ = s.Close()
		return nil, fmt.Errorf("open sqlite store %s: %w", path, mapErr(err))
	}
	s.doneCount.Store(done)
	return s, nil
}

func (s *Store) dsn(readOnly bool) string {
	q := url.Values{}
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", s.opts.BusyTimeout.Milliseconds()))
	q.Add("_pragma", "synchronous("+s.opts.Sync+")")
	q.Add("_pragma", fmt.Sprintf("cache_size(-%d)", s.opts.CacheKiB))
	if readOnly {
		q.Add("_pragma", "query_only(1)")
	} else {
		q.Set("_txlock", "immediate")
	}
	return "file:" + uriPath.Replace(s.path) + "?" + q.Encode()
}

// uriPath escapes what SQLite's URI file names would otherwise read as a
// query ("?"), a fragment ("#") or an escape ("%").
var uriPath = strings.NewReplacer("%", "%25", "?", "%3F", "#", "%23")

// Path returns the file the store lives in.
func (s *Store) Path() string { return s.path }

// Close closes both connection pools. It is idempotent, so a *Store used as
// both stores.Store and stores.Leases may be closed through either.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.stmts.close()
		var errs []error
		if s.r != nil {
			errs = append(errs, s.r.Close())
		}
		errs = append(errs, s.w.Close())
		s.closeErr = errors.Join(errs...)
	})
	return s.closeErr
}

// mapErr translates SQLite errors into stores sentinels: a full disk or
// database (SQLITE_FULL) becomes stores.ErrFull. The original stays wrapped.
func mapErr(err error) error {
	var se *sqlite.Error
	if errors.As(err, &se) && se.Code()&0xff == 13 { // SQLITE_FULL
		return fmt.Errorf("%w: %w", stores.ErrFull, err)
	}
	return err
}

// nanos and fromNanos store times as Unix nanoseconds, zero as 0.
func nanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func fromNanos(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}

// columns is the column list scanRecord reads.
const columns = `seq, session, part, route, id, topic, payload, headers, qos, received_at, okey, ckey,
	causation_id, state, attempts, first_attempt_at, next_at, last_error, created_at, expires_at,
	token, claim_until, dead_at, dead_reason`

// scanClaimed reads a row of sqlClaim as claimed by req at now (sqlClaimMark
// adds the attempt and stamps the first one).
func scanClaimed(sc scanner, req *stores.ClaimRequest, now int64) (stores.Record, error) {
	r := stores.Record{Session: req.Session, Partition: req.Partition, State: stores.Claimed,
		Token: req.Token, ClaimUntil: fromNanos(nanos(req.Until))}
	var (
		rare                           sql.NullString
		received, first, next, created int64
		expires                        int64
	)
	err := sc.Scan(&r.Seq, &r.Attempts, &first, &next, &r.Route, &r.Envelope.ID, &r.Envelope.Topic,
		&r.Envelope.Payload, &r.Envelope.QoS, &received, &created, &rare)
	if err != nil {
		return r, err
	}
	if rare.Valid {
		// The columns that are usually empty come as one JSON array:
		// headers, last error, ordering key, coalesce key, causation ID,
		// expiry.
		var headers *string
		v := []any{&headers, &r.LastError, &r.Envelope.Key, &r.CoalesceKey, &r.CausationID, &expires}
		if err := json.Unmarshal([]byte(rare.String), &v); err != nil {
			return r, fmt.Errorf("decode columns of %s: %w", r.Envelope.ID, err)
		}
		if headers != nil {
			if err := json.Unmarshal([]byte(*headers), &r.Envelope.Headers); err != nil {
				return r, fmt.Errorf("decode headers of %s: %w", r.Envelope.ID, err)
			}
		}
	}
	r.Attempts++
	if first == 0 {
		first = now
	}
	r.Envelope.ReceivedAt = fromNanos(received)
	r.FirstAttemptAt = fromNanos(first)
	r.NextAttemptAt = fromNanos(next)
	r.CreatedAt = fromNanos(created)
	r.ExpiresAt = fromNanos(expires)
	return r, nil
}

type scanner interface{ Scan(dest ...any) error }

func scanRecord(sc scanner) (stores.Record, error) {
	var (
		r                                                      stores.Record
		headers                                                sql.NullString
		state                                                  string
		received, first, next, created, expires, until, deadAt int64
	)
	err := sc.Scan(&r.Seq, &r.Session, &r.Partition, &r.Route, &r.Envelope.ID, &r.Envelope.Topic,
		&r.Envelope.Payload, &headers, &r.Envelope.QoS, &received, &r.Envelope.Key, &r.CoalesceKey,
		&r.CausationID, &state, &r.Attempts, &first, &next, &r.LastError, &created, &expires,
		&r.Token, &until, &deadAt, &r.DeadReason)
	if err != nil {
		return r, err
	}
	if headers.Valid {
		if err := json.Unmarshal([]byte(headers.String), &r.Envelope.Headers); err != nil {
			return r, fmt.Errorf("decode headers of %s: %w", r.Envelope.ID, err)
		}
	}
	r.State = stores.State(state)
	r.Envelope.ReceivedAt = fromNanos(received)
	r.FirstAttemptAt = fromNanos(first)
	r.NextAttemptAt = fromNanos(next)
	r.CreatedAt = fromNanos(created)
	r.ExpiresAt = fromNanos(expires)
	r.ClaimUntil = fromNanos(until)
	r.DeadAt = fromNanos(deadAt)
	return r, nil
}

func encodeHeaders(h map[string]string) (any, error) {
	if len(h) == 0 {
		return nil, nil
	}
	b, err := json.Marshal(h)
	if err != nil {
		return nil, err
	}
	return string(b), nil
}
