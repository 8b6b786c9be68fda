package sqlite

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/gobridge/gobridge/stores"
)

// Acquire implements stores.Leases. Tokens come from one counter in the
// file, so they grow across names and restarts.
func (s *Store) Acquire(ctx context.Context, name, owner string, ttl time.Duration, now time.Time) (stores.Lease, error) {
	if name == "" || owner == "" || ttl <= 0 {
		return stores.Lease{}, fmt.Errorf("sqlite: acquire lease: %w: name %q, owner %q, ttl %v", stores.ErrInvalid, name, owner, ttl)
	}
	le := stores.Lease{Name: name, Owner: owner, Until: now.Add(ttl)}
	err := s.leaseTx(ctx, func() error {
		var (
			cur   string
			until int64
		)
		if ok, err := s.queryRow(ctx, `SELECT owner, until FROM lease WHERE name = ?`, []any{name}, &cur, &until); err != nil {
			return err
		} else if ok && cur != owner && until > nanos(now) {
			return fmt.Errorf("%w (by %q until %v)", stores.ErrLeaseHeld, cur, fromNanos(until))
		}
		if _, err := s.queryRow(ctx, `UPDATE meta SET token = token + 1 RETURNING token`, nil, &le.Token); err != nil {
			return err
		}
		_, err := s.exec(ctx, `INSERT INTO lease (name, owner, token, until) VALUES (?1, ?2, ?3, ?4)
			ON CONFLICT (name) DO UPDATE SET owner=?2, token=?3, until=?4`, name, owner, le.Token, nanos(le.Until))
		return err
	})
	if err != nil {
		return stores.Lease{}, fmt.Errorf("sqlite: acquire lease %q: %w", name, err)
	}
	return le, nil
}

// Renew implements stores.Leases.
func (s *Store) Renew(ctx context.Context, le stores.Lease, ttl time.Duration, now time.Time) (stores.Lease, error) {
	if ttl <= 0 {
		return stores.Lease{}, fmt.Errorf("sqlite: renew lease: %w: ttl %v", stores.ErrInvalid, ttl)
	}
	le.Until = now.Add(ttl)
	err := s.leaseChange(ctx, `UPDATE lease SET until = ? WHERE name = ? AND token = ?`, nanos(le.Until), le.Name, le.Token)
	if err != nil {
		return stores.Lease{}, fmt.Errorf("sqlite: renew lease %q: %w", le.Name, err)
	}
	return le, nil
}

// Release implements stores.Leases.
func (s *Store) Release(ctx context.Context, le stores.Lease) error {
	if err := s.leaseChange(ctx, `DELETE FROM lease WHERE name = ? AND token = ?`, le.Name, le.Token); err != nil {
		return fmt.Errorf("sqlite: release lease %q: %w", le.Name, err)
	}
	return nil
}

// leaseChange runs query, a change of one lease guarded by its token, in a
// transaction: stores.ErrLeaseLost when it changes nothing.
func (s *Store) leaseChange(ctx context.Context, query string, args ...any) error {
	return s.leaseTx(ctx, func() error {
		n, err := s.exec(ctx, query, args...)
		if n == 0 {
			return cmp.Or(err, stores.ErrLeaseLost)
		}
		return err
	})
}

func (s *Store) leaseTx(ctx context.Context, fn func() error) error {
	if err := s.enter(ctx, true); err != nil {
		return err
	}
	defer s.leave()
	return mapErr(s.tx(ctx, true, fn))
}

// List implements stores.Leases; leases come sorted by name.
func (s *Store) List(ctx context.Context, prefix string, now time.Time) ([]stores.Lease, error) {
	if err := s.enter(ctx, false); err != nil {
		return nil, fmt.Errorf("sqlite: list leases: %w", err)
	}
	defer s.leave()
	var out []stores.Lease
	err := s.each(ctx, `SELECT name, owner, token, until FROM lease WHERE name >= ? AND until > ? ORDER BY name`,
		[]any{prefix, nanos(now)}, func(rows *sql.Rows) error {
			var (
				le    stores.Lease
				until int64
			)
			err := rows.Scan(&le.Name, &le.Owner, &le.Token, &until)
			if le.Until = fromNanos(until); strings.HasPrefix(le.Name, prefix) {
				out = append(out, le)
			}
			return err
		})
	if err != nil {
		return nil, fmt.Errorf("sqlite: list leases: %w", err)
	}
	return out, nil
}
