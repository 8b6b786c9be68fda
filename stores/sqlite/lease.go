package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/gobridge/gobridge/stores"
)

// Leases is the lease table of a SQLite store file (stores.Leases). Get one
// from Store.Leases, sharing the store's connections, or from OpenLeases.
type Leases struct {
	s   *Store
	own bool // Close closes s
}

// Leases returns the lease table in s's file, sharing its connections. Its
// Close does nothing: closing s closes it.
func (s *Store) Leases() *Leases { return &Leases{s: s} }

// OpenLeases opens (creating if needed) the store file at path for its lease
// table alone. Close closes the file.
func OpenLeases(path string, opts Options) (*Leases, error) {
	s, err := Open(path, opts)
	if err != nil {
		return nil, err
	}
	return &Leases{s: s, own: true}, nil
}

// Close closes the underlying store when this table was made by OpenLeases.
func (l *Leases) Close() error {
	if l.own {
		return l.s.Close()
	}
	return nil
}

// Store returns the store whose file holds the table.
func (l *Leases) Store() *Store { return l.s }

// Acquire implements stores.Leases. Tokens come from one counter in the
// file, so they grow across restarts and across names.
func (l *Leases) Acquire(ctx context.Context, name, owner string, ttl time.Duration, now time.Time) (stores.Lease, error) {
	if name == "" || owner == "" || ttl <= 0 {
		return stores.Lease{}, fmt.Errorf("acquire lease: %w: name %q, owner %q, ttl %v", stores.ErrInvalid, name, owner, ttl)
	}
	le := stores.Lease{Name: name, Owner: owner, Until: now.Add(ttl)}
	err := l.s.writeTx(ctx, func(tx *sql.Tx, _ map[partKey]int) error {
		var (
			curOwner string
			until    int64
		)
		err := tx.QueryRowContext(ctx, `SELECT owner, until FROM lease WHERE name = ?`, name).Scan(&curOwner, &until)
		switch {
		case errors.Is(err, sql.ErrNoRows):
		case err != nil:
			return err
		case curOwner != owner && until > nanos(now):
			return fmt.Errorf("%w (by %q until %v)", stores.ErrLeaseHeld, curOwner, fromNanos(until))
		}
		if err := tx.QueryRowContext(ctx, `UPDATE lease_token SET token = token + 1 WHERE id = 1 RETURNING token`).
			Scan(&le.Token); err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO lease (name, owner, token, until) VALUES (?, ?, ?, ?)
			ON CONFLICT (name) DO UPDATE SET owner = excluded.owner, token = excluded.token, until = excluded.until`,
			name, owner, le.Token, nanos(le.Until))
		return err
	})
	if err != nil {
		return stores.Lease{}, fmt.Errorf("acquire lease %q: %w", name, err)
	}
	return le, nil
}

// Renew implements stores.Leases.
func (t *Leases) Renew(ctx context.Context, l stores.Lease, ttl time.Duration, now time.Time) (stores.Lease, error) {
	if ttl <= 0 {
		return stores.Lease{}, fmt.Errorf("renew lease: %w: ttl %v", stores.ErrInvalid, ttl)
	}
	l.Until = now.Add(ttl)
	err := t.s.writeTx(ctx, func(tx *sql.Tx, _ map[partKey]int) error {
		err := tx.QueryRowContext(ctx, `UPDATE lease SET until = ? WHERE name = ? AND token = ? RETURNING owner`,
			nanos(l.Until), l.Name, l.Token).Scan(&l.Owner)
		if errors.Is(err, sql.ErrNoRows) {
			return stores.ErrLeaseLost
		}
		return err
	})
	if err != nil {
		return stores.Lease{}, fmt.Errorf("renew lease %q: %w", l.Name, err)
	}
	return l, nil
}

// Release implements stores.Leases.
func (t *Leases) Release(ctx context.Context, l stores.Lease) error {
	err := t.s.writeTx(ctx, func(tx *sql.Tx, _ map[partKey]int) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM lease WHERE name = ? AND token = ?`, l.Name, l.Token)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n != 1 {
			return errors.Join(err, stores.ErrLeaseLost)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("release lease %q: %w", l.Name, err)
	}
	return nil
}

// List implements stores.Leases; leases come sorted by name.
func (l *Leases) List(ctx context.Context, prefix string, now time.Time) ([]stores.Lease, error) {
	rows, err := l.s.r.QueryContext(ctx, `SELECT name, owner, token, until FROM lease WHERE until > ?`, nanos(now))
	if err != nil {
		return nil, fmt.Errorf("list leases: %w", mapErr(err))
	}
	defer rows.Close()
	var out []stores.Lease
	for rows.Next() {
		var (
			l     stores.Lease
			until int64
		)
		if err := rows.Scan(&l.Name, &l.Owner, &l.Token, &until); err != nil {
			return nil, fmt.Errorf("list leases: %w", err)
		}
		if strings.HasPrefix(l.Name, prefix) {
			l.Until = fromNanos(until)
			out = append(out, l)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list leases: %w", err)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}
