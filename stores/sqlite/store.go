// Package sqlite is the single-node durable backend of the stores contract:
// one SQLite file (modernc.org/sqlite, pure Go, WAL) owned by one process
// holds the outbox, its dead letters and the lease table. docs/DESIGN.md §4
// describes its schema (schema.go), its transactions and single ownership.
//
// Open takes an exclusive flock on <path>.lock for the life of the Store (a
// second Open, in any process, fails with a *LockedError) and starts a new
// epoch: every lease in the file ends, so the claims of the previous process
// are void as soon as this one acquires the partitions' leases.
// Options.ReadOnly opens without the lock, for the command line.
package sqlite

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	sqlite "modernc.org/sqlite"

	"github.com/gobridge/gobridge/stores"
)

var _ stores.Store = (*Store)(nil)

// DefaultDoneRetention is how many tombstones a store keeps by default.
const DefaultDoneRetention = 100_000

// cacheKiB is SQLite's page cache of the store's connection: the indexes
// the hot path touches are at their right-hand ends, so a few MiB keep them
// in memory whatever the backlog.
const cacheKiB = 4096

// journalLimit is what the -wal file is cut back to when a checkpoint has
// emptied it (PRAGMA journal_size_limit). It grows past its usual 16 MiB (a
// checkpoint every 4,000 pages) only while a reader in another process
// holds a snapshot, and would otherwise stay at that peak until Close.
const journalLimit = 32 << 20

// ErrReadOnly is returned by the calls that change a store opened with
// Options.ReadOnly.
var ErrReadOnly = errors.New("sqlite: store opened read-only (another process may own it)")

// ErrSchema is returned by Open for a file whose layout is not this
// version's (nothing migrates one: nothing before it shipped).
var ErrSchema = errors.New("sqlite: the file's schema is not this gobridge's: move the file away")

// Options tunes a Store.
type Options struct {
	// Sync is the durability of a commit: "full" (the default) fsyncs the
	// WAL on every commit, so a Write that returned survives a power loss;
	// "normal" fsyncs only at checkpoints, so a power loss (not a process
	// crash) may lose the last commits.
	Sync string
	// DoneRetention is how many tombstones (keys of delivered, dropped or
	// coalesced-away records, without their payload) the store keeps so
	// that appending such a record again is a no-op; older ones are
	// deleted. Defaults to DefaultDoneRetention; negative keeps none.
	DoneRetention int
	// ReadOnly opens an existing file without taking the lock, for
	// reading (Dead, Stats, List) while another process owns it: Write,
	// Claim and the lease changes fail with ErrReadOnly.
	ReadOnly bool
	// Now is the store's clock (CreatedAt, DeadAt). Defaults to time.Now.
	Now func() time.Time
}

// Store is a SQLite stores.Store. It is safe for concurrent use; every call
// runs on one connection, one at a time: a call waiting for its turn ends
// with its context, and so does one inside SQLite (the driver interrupts
// it, and ends its wait for another process's lock, busy_timeout 5 s).
type Store struct {
	path string
	opts Options
	db   *sql.DB
	lock *os.File // nil when read-only

	turn     chan struct{} // 1 slot: held by the call that runs
	conn     *sql.Conn
	stmts    map[string]*sql.Stmt
	closed   bool
	seq      int64  // the last Seq given
	tombs    int64  // tombstones in the file
	tomb     int64  // the number of the last Write that made tombstones
	syncMode string // the connection's synchronous pragma: opts.Sync, or normal for a commit that need not be durable
}

// Open opens the store at path, creating it (and its directory, 0700; the
// files are 0600) unless opts.ReadOnly. It fails with a *LockedError when
// another Store, in any process, has the file open, and refuses a file on a
// network filesystem.
func Open(path string, opts Options) (*Store, error) {
	if opts.Sync = cmp.Or(opts.Sync, "full"); opts.Sync != "full" && opts.Sync != "normal" {
		return nil, fmt.Errorf("sqlite: open %s: %w: sync %q is not full or normal", path, stores.ErrInvalid, opts.Sync)
	}
	opts.DoneRetention = cmp.Or(opts.DoneRetention, DefaultDoneRetention)
	if opts.Now == nil {
		opts.Now = time.Now
	}
	s := &Store{path: path, opts: opts, stmts: map[string]*sql.Stmt{}, turn: make(chan struct{}, 1)}
	if err := s.open(); err != nil {
		_ = s.Close()
		return nil, fmt.Errorf("sqlite: open %s: %w", path, mapErr(err))
	}
	return s, nil
}

func (s *Store) open() error {
	q := url.Values{}
	q.Add("_pragma", "busy_timeout(5000)")
	q.Add("_pragma", fmt.Sprintf("cache_size(-%d)", cacheKiB))
	q.Add("_pragma", "temp_store(memory)") // statement journals
	q.Add("_pragma", "wal_autocheckpoint(4000)")
	q.Add("_pragma", fmt.Sprintf("journal_size_limit(%d)", journalLimit))
	if s.opts.ReadOnly {
		if _, err := os.Stat(s.path); err != nil {
			return err
		}
		q.Set("mode", "ro")
		q.Add("_pragma", "query_only(1)")
	} else {
		var err error
		if s.lock, err = own(s.path); err != nil {
			return err
		}
		q.Add("_pragma", "journal_mode(WAL)")
		q.Add("_pragma", "synchronous("+s.opts.Sync+")")
		q.Set("_txlock", "immediate")
	}
	var err error
	if s.db, err = sql.Open("sqlite", "file:"+uriPath.Replace(s.path)+"?"+q.Encode()); err != nil {
		return err
	}
	s.db.SetMaxOpenConns(1)
	ctx := context.Background()
	if s.conn, err = s.db.Conn(ctx); err != nil {
		return err
	}
	var version int
	if err := s.conn.QueryRowContext(ctx, `PRAGMA user_version`).Scan(&version); err != nil {
		return err
	}
	if version != schemaVersion && (version != 0 || s.opts.ReadOnly) {
		return fmt.Errorf("%w (schema version %d, this gobridge reads %d)", ErrSchema, version, schemaVersion)
	}
	if s.opts.ReadOnly {
		return nil
	}
	s.syncMode = s.opts.Sync
	return s.tx(ctx, true, func() error {
		if version == 0 {
			if _, err := s.conn.ExecContext(ctx, schema+fmt.Sprintf(`; PRAGMA user_version = %d`, schemaVersion)); err != nil {
				return err
			}
		}
		// A new epoch: the previous owner is gone, and so are its leases.
		_, err := s.conn.ExecContext(ctx, `DELETE FROM lease; UPDATE meta SET epoch = epoch + 1`)
		if err == nil {
			err = s.conn.QueryRowContext(ctx, `SELECT max(seq, (SELECT coalesce(max(seq), 0) FROM outbox)),
				(SELECT count(*) FROM outbox WHERE state=2), (SELECT coalesce(max(tomb), 0) FROM outbox WHERE state=2)
				FROM meta`).Scan(&s.seq, &s.tombs, &s.tomb)
		}
		return err
	})
}

// uriPath escapes what SQLite's URI file names would otherwise read as a
// query ("?"), a fragment ("#") or an escape ("%").
var uriPath = strings.NewReplacer("%", "%25", "?", "%3F", "#", "%23")

// Path returns the file the store lives in.
func (s *Store) Path() string { return s.path }

// Close closes the file and releases its lock. It is idempotent.
func (s *Store) Close() error {
	s.turn <- struct{}{}
	defer s.leave()
	if s.closed {
		return nil
	}
	s.closed = true
	var errs []error
	for _, st := range s.stmts {
		errs = append(errs, st.Close())
	}
	if s.conn != nil {
		errs = append(errs, s.conn.Close())
	}
	if s.db != nil {
		errs = append(errs, s.db.Close())
	}
	if s.lock != nil {
		errs = append(errs, s.lock.Close()) // releases the flock
	}
	return errors.Join(errs...)
}

// enter waits for the store's turn for a call, or for the end of ctx;
// write calls fail on a read-only store. The caller calls leave when enter
// returns nil.
func (s *Store) enter(ctx context.Context, write bool) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if write && s.opts.ReadOnly {
		return ErrReadOnly
	}
	select {
	case s.turn <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	if s.closed {
		s.leave()
		return stores.ErrClosed
	}
	return nil
}

// leave ends the turn enter took.
func (s *Store) leave() { <-s.turn }

// tx runs fn in a transaction on s.conn, committed when fn returns nil. ctx
// may interrupt fn, never the COMMIT: its result must be what happened. A
// commit that need not be durable skips the fsync (synchronous=normal): a
// power loss may undo it, a process crash cannot, and what survives is a
// prefix of the commits.
func (s *Store) tx(ctx context.Context, durable bool, fn func() error) error {
	mode := s.opts.Sync
	if !durable {
		mode = "normal"
	}
	// The driver may report the end of ctx after a statement ran: a pragma
	// that failed may have applied, a BEGIN that failed may have begun.
	if mode != s.syncMode {
		if _, err := s.conn.ExecContext(ctx, `PRAGMA synchronous = `+mode); err != nil {
			s.syncMode = "" // unknown: set it again next time
			return err
		}
		s.syncMode = mode
	}
	if _, err := s.conn.ExecContext(ctx, `BEGIN IMMEDIATE`); err != nil {
		_, _ = s.conn.ExecContext(context.WithoutCancel(ctx), `ROLLBACK`) // fails when none began
		return err
	}
	err := fn()
	if err == nil {
		if _, err = s.conn.ExecContext(context.WithoutCancel(ctx), `COMMIT`); err == nil {
			return nil
		}
	}
	_, _ = s.conn.ExecContext(context.WithoutCancel(ctx), `ROLLBACK`) // fails when SQLite rolled back already
	return err
}

// stmt returns the prepared statement of query on s.conn.
func (s *Store) stmt(ctx context.Context, query string) (*sql.Stmt, error) {
	if st := s.stmts[query]; st != nil {
		return st, nil
	}
	st, err := s.conn.PrepareContext(ctx, query)
	if err != nil {
		return nil, fmt.Errorf("prepare %q: %w", query, err)
	}
	s.stmts[query] = st
	return st, nil
}

func (s *Store) exec(ctx context.Context, query string, args ...any) (int64, error) {
	st, err := s.stmt(ctx, query)
	if err != nil {
		return 0, err
	}
	res, err := st.ExecContext(ctx, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// each runs query and calls fn on each row.
func (s *Store) each(ctx context.Context, query string, args []any, fn func(*sql.Rows) error) error {
	st, err := s.stmt(ctx, query)
	if err != nil {
		return err
	}
	rows, err := st.QueryContext(ctx, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := fn(rows); err != nil {
			return err
		}
	}
	return rows.Err()
}

// queryRow scans the row of query into dest; ok is false when there is
// none.
func (s *Store) queryRow(ctx context.Context, query string, args []any, dest ...any) (ok bool, err error) {
	err = s.each(ctx, query, args, func(rows *sql.Rows) error {
		ok = true
		return rows.Scan(dest...)
	})
	return ok && err == nil, err
}

// damaged is what an operator can do about an outbox file SQLite finds
// damaged (a power loss on a card without power-loss protection, a disk
// error) or that is not a database at all.
const damaged = "the outbox file is damaged or not a gobridge outbox: stop gobridge, move the file and its -wal " +
	"and -shm files aside and start again with an empty outbox; `sqlite3 FILE .recover` may save the records it held"

// mapErr translates a full disk or database (SQLITE_FULL) into
// stores.ErrFull and a value over SQLite's 1 GB limit (SQLITE_TOOBIG) into
// stores.ErrInvalid, keeping the original wrapped, and says what to do
// about a damaged file.
func mapErr(err error) error {
	var se *sqlite.Error
	if errors.As(err, &se) {
		switch se.Code() & 0xff {
		case 13: // SQLITE_FULL
			return fmt.Errorf("%w: %w", stores.ErrFull, err)
		case 18: // SQLITE_TOOBIG
			return fmt.Errorf("%w: %w", stores.ErrInvalid, err)
		case 11, 26: // SQLITE_CORRUPT, SQLITE_NOTADB
			return fmt.Errorf("%w (%s)", err, damaged)
		}
	}
	return err
}
