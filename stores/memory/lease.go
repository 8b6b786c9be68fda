package memory

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/gobridge/gobridge/stores"
)

// Leases is an in-memory stores.Leases. Tokens come from one counter per
// Leases value, so they only grow while the process lives. It is safe for
// concurrent use.
type Leases struct {
	mu     sync.Mutex
	closed bool
	token  int64
	leases map[string]stores.Lease
}

// NewLeases returns an empty lease table.
func NewLeases() *Leases { return &Leases{leases: make(map[string]stores.Lease)} }

func (l *Leases) lock(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return errClosed
	}
	return nil
}

// Acquire implements stores.Leases.
func (l *Leases) Acquire(ctx context.Context, name, owner string, ttl time.Duration, now time.Time) (stores.Lease, error) {
	if name == "" || owner == "" || ttl <= 0 {
		return stores.Lease{}, fmt.Errorf("acquire lease: %w: name %q, owner %q, ttl %v", stores.ErrInvalid, name, owner, ttl)
	}
	if err := l.lock(ctx); err != nil {
		return stores.Lease{}, fmt.Errorf("acquire lease %q: %w", name, err)
	}
	defer l.mu.Unlock()
	if cur, ok := l.leases[name]; ok && cur.Owner != owner && cur.Until.After(now) {
		return stores.Lease{}, fmt.Errorf("acquire lease %q: %w (by %q until %v)", name, stores.ErrLeaseHeld, cur.Owner, cur.Until)
	}
	l.token++
	le := stores.Lease{Name: name, Owner: owner, Token: l.token, Until: now.Add(ttl)}
	l.leases[name] = le
	return le, nil
}

// Renew implements stores.Leases.
func (l *Leases) Renew(ctx context.Context, le stores.Lease, ttl time.Duration, now time.Time) (stores.Lease, error) {
	if ttl <= 0 {
		return stores.Lease{}, fmt.Errorf("renew lease: %w: ttl %v", stores.ErrInvalid, ttl)
	}
	if err := l.lock(ctx); err != nil {
		return stores.Lease{}, fmt.Errorf("renew lease %q: %w", le.Name, err)
	}
	defer l.mu.Unlock()
	cur, ok := l.leases[le.Name]
	if !ok || cur.Token != le.Token {
		return stores.Lease{}, fmt.Errorf("renew lease %q: %w", le.Name, stores.ErrLeaseLost)
	}
	cur.Until = now.Add(ttl)
	l.leases[le.Name] = cur
	return cur, nil
}

// Release implements stores.Leases.
func (l *Leases) Release(ctx context.Context, le stores.Lease) error {
	if err := l.lock(ctx); err != nil {
		return fmt.Errorf("release lease %q: %w", le.Name, err)
	}
	defer l.mu.Unlock()
	cur, ok := l.leases[le.Name]
	if !ok || cur.Token != le.Token {
		return fmt.Errorf("release lease %q: %w", le.Name, stores.ErrLeaseLost)
	}
	delete(l.leases, le.Name)
	return nil
}

// List implements stores.Leases; leases come sorted by name.
func (l *Leases) List(ctx context.Context, prefix string, now time.Time) ([]stores.Lease, error) {
	if err := l.lock(ctx); err != nil {
		return nil, fmt.Errorf("list leases: %w", err)
	}
	defer l.mu.Unlock()
	var out []stores.Lease
	for name, le := range l.leases {
		if strings.HasPrefix(name, prefix) && le.Until.After(now) {
			out = append(out, le)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Close marks the table closed; later calls fail. It is idempotent.
func (l *Leases) Close() error {
	l.mu.Lock()
	l.closed = true
	l.mu.Unlock()
	return nil
}
