package memory

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/gobridge/gobridge/stores"
)

// Acquire implements stores.Leases.
func (s *Store) Acquire(ctx context.Context, name, owner string, ttl time.Duration, now time.Time) (stores.Lease, error) {
	if name == "" || owner == "" || ttl <= 0 {
		return stores.Lease{}, fmt.Errorf("acquire lease: %w: name %q, owner %q, ttl %v", stores.ErrInvalid, name, owner, ttl)
	}
	if err := s.lock(ctx); err != nil {
		return stores.Lease{}, fmt.Errorf("acquire lease %q: %w", name, err)
	}
	defer s.mu.Unlock()
	if cur, ok := s.leases[name]; ok && cur.Owner != owner && cur.Until.After(now) {
		return stores.Lease{}, fmt.Errorf("acquire lease %q: %w (by %q until %v)", name, stores.ErrLeaseHeld, cur.Owner, cur.Until)
	}
	s.token++
	le := stores.Lease{Name: name, Owner: owner, Token: s.token, Until: now.Add(ttl)}
	s.leases[name] = le
	return le, nil
}

// Renew implements stores.Leases.
func (s *Store) Renew(ctx context.Context, le stores.Lease, ttl time.Duration, now time.Time) (stores.Lease, error) {
	if ttl <= 0 {
		return stores.Lease{}, fmt.Errorf("renew lease: %w: ttl %v", stores.ErrInvalid, ttl)
	}
	if err := s.lock(ctx); err != nil {
		return stores.Lease{}, fmt.Errorf("renew lease %q: %w", le.Name, err)
	}
	defer s.mu.Unlock()
	cur, ok := s.leases[le.Name]
	if !ok || cur.Token != le.Token {
		return stores.Lease{}, fmt.Errorf("renew lease %q: %w", le.Name, stores.ErrLeaseLost)
	}
	cur.Until = now.Add(ttl)
	s.leases[le.Name] = cur
	return cur, nil
}

// Release implements stores.Leases.
func (s *Store) Release(ctx context.Context, le stores.Lease) error {
	if err := s.lock(ctx); err != nil {
		return fmt.Errorf("release lease %q: %w", le.Name, err)
	}
	defer s.mu.Unlock()
	cur, ok := s.leases[le.Name]
	if !ok || cur.Token != le.Token {
		return fmt.Errorf("release lease %q: %w", le.Name, stores.ErrLeaseLost)
	}
	delete(s.leases, le.Name)
	return nil
}

// List implements stores.Leases; leases come sorted by name.
func (s *Store) List(ctx context.Context, prefix string, now time.Time) ([]stores.Lease, error) {
	if err := s.lock(ctx); err != nil {
		return nil, fmt.Errorf("list leases: %w", err)
	}
	defer s.mu.Unlock()
	var out []stores.Lease
	for name, le := range s.leases {
		if strings.HasPrefix(name, prefix) && le.Until.After(now) {
			out = append(out, le)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}
