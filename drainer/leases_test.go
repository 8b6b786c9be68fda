package drainer

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gobridge/gobridge/message"
	"github.com/gobridge/gobridge/stores"
	"github.com/gobridge/gobridge/stores/memory"
)

var errCrashed = errors.New("process crashed")

// crashable wraps a real store and lease store; after crash every call
// fails, as if the process had died (nothing is released).
type crashable struct {
	stores.Outbox
	leases  stores.Leases
	crashed atomic.Bool
}

func (c *crashable) Claim(ctx context.Context, req stores.ClaimRequest) ([]stores.Record, error) {
	if c.crashed.Load() {
		return nil, errCrashed
	}
	return c.Outbox.Claim(ctx, req)
}

func (c *crashable) Complete(ctx context.Context, recs ...stores.Record) error {
	if c.crashed.Load() {
		return errCrashed
	}
	return c.Outbox.Complete(ctx, recs...)
}

func (c *crashable) Release(ctx context.Context, rec stores.Record, next time.Time, e string) error {
	if c.crashed.Load() {
		return errCrashed
	}
	return c.Outbox.Release(ctx, rec, next, e)
}

func (c *crashable) DeadLetter(ctx context.Context, rec stores.Record, reason string) error {
	if c.crashed.Load() {
		return errCrashed
	}
	return c.Outbox.DeadLetter(ctx, rec, reason)
}

// crashLeases is the lease side of a crashable.
type crashLeases struct{ c *crashable }

func (l crashLeases) Acquire(ctx context.Context, name, owner string, ttl time.Duration, now time.Time) (stores.Lease, error) {
	if l.c.crashed.Load() {
		return stores.Lease{}, errCrashed
	}
	return l.c.leases.Acquire(ctx, name, owner, ttl, now)
}

func (l crashLeases) Renew(ctx context.Context, le stores.Lease, ttl time.Duration, now time.Time) (stores.Lease, error) {
	if l.c.crashed.Load() {
		return stores.Lease{}, errCrashed
	}
	return l.c.leases.Renew(ctx, le, ttl, now)
}

func (l crashLeases) Release(ctx context.Context, le stores.Lease) error {
	if l.c.crashed.Load() {
		return errCrashed
	}
	return l.c.leases.Release(ctx, le)
}

func (l crashLeases) List(ctx context.Context, prefix string, now time.Time) ([]stores.Lease, error) {
	if l.c.crashed.Load() {
		return nil, errCrashed
	}
	return l.c.leases.List(ctx, prefix, now)
}

func (l crashLeases) Close() error { return nil }

// holders counts the partition leases each owner holds.
func holders(t *testing.T, leases stores.Leases) map[string]int {
	t.Helper()
	ls, err := leases.List(context.Background(), "outbox/s/", time.Now())
	if err != nil {
		t.Fatalf("list leases: %v", err)
	}
	m := map[string]int{}
	for _, l := range ls {
		m[l.Owner]++
	}
	return m
}

func leaseToken(t *testing.T, leases stores.Leases, name string) int64 {
	t.Helper()
	ls, err := leases.List(context.Background(), name, time.Now())
	if err != nil || len(ls) != 1 {
		t.Fatalf("lease %s: %v %v", name, ls, err)
	}
	return ls[0].Token
}

func TestGroup_OnlyTheHolderSendsAndATakeoverFencesTheOldOwner(t *testing.T) {
	backends(t, func(t *testing.T, store stores.Store) {
		leases := memory.NewLeases()
		hang := make(chan struct{})
		sa := newScriptSender(1, func(ctx context.Context, _ *message.Envelope, n int) error {
			<-hang // the old owner hangs mid-send, then its process dies
			return nil
		})
		sb := newScriptSender(1, nil)
		a := &crashable{Outbox: store, leases: leases}
		ga := New(testConfig(t, sa, testPolicy(), nil), a, crashLeases{a})
		cfgB := testConfig(t, sb, testPolicy(), nil)
		cfgB.Owner = "b"
		gb := New(cfgB, store, leases)

		appendRecords(t, store, 5, nil)
		stopA := running(t, ga)
		eventually(t, time.Second, "a holds the partition", func() bool { return holders(t, leases)["a"] == 1 })
		stopB := running(t, gb)
		eventually(t, 2*time.Second, "a is sending", func() bool { return sa.total() > 0 })
		tokenA := leaseToken(t, leases, PartitionLease("s", 0))

		// While a holds the lease, b sends nothing, however long it waits.
		advance(10 * time.Second)
		if sb.total() != 0 || holders(t, leases)["b"] != 0 {
			t.Fatalf("b sent %d records while a held the lease", sb.total())
		}

		a.crashed.Store(true) // a dies: no renew, no release
		eventually(t, time.Minute, "b took over and delivered", func() bool {
			return holders(t, leases)["b"] == 1 && pending(t, store) == 0
		})
		// The old owner's late complete is fenced off by its stale token.
		late := stores.Record{Session: "s", Route: "r", Token: tokenA}
		late.Envelope.ID = "m000"
		if err := store.Complete(context.Background(), late); !errors.Is(err, stores.ErrStaleToken) {
			t.Errorf("late complete by the old owner: %v, want ErrStaleToken", err)
		}
		close(hang)
		if err := stopA(); err != nil {
			t.Errorf("Run a: %v", err)
		}
		if err := stopB(); err != nil {
			t.Errorf("Run b: %v", err)
		}
	})
}

func TestGroup_SharesPartitionsFairlyAndRebalances(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := memory.New()
		defer store.Close()
		leases := memory.NewLeases()
		newGroup := func(owner string) *Group {
			cfg := testConfig(t, newScriptSender(1, nil), testPolicy(), nil)
			cfg.Owner, cfg.Partitions = owner, 4
			return New(cfg, store, leases)
		}
		stopA := running(t, newGroup("a"))
		eventually(t, time.Second, "a alone takes all", func() bool { return holders(t, leases)["a"] == 4 })
		stopB := running(t, newGroup("b"))
		eventually(t, 10*time.Second, "a and b share", func() bool {
			h := holders(t, leases)
			return h["a"] == 2 && h["b"] == 2
		})
		if err := stopB(); err != nil {
			t.Fatalf("Run b: %v", err)
		}
		eventually(t, 10*time.Second, "a takes b's share back", func() bool { return holders(t, leases)["a"] == 4 })
		if err := stopA(); err != nil {
			t.Fatalf("Run a: %v", err)
		}
	})
}

func TestGroup_StopsAtOnceWhenItsLeaseIsLost(t *testing.T) {
	backends(t, func(t *testing.T, store stores.Store) {
		leases := memory.NewLeases()
		snd := newScriptSender(1, func(ctx context.Context, _ *message.Envelope, _ int) error {
			<-ctx.Done() // in flight until the drainer cancels it
			return ctx.Err()
		})
		j := newJournal()
		g := New(testConfig(t, snd, testPolicy(), j), store, leases)
		appendRecords(t, store, 3, nil)
		stop := running(t, g)
		eventually(t, time.Second, "sending", func() bool { return snd.total() > 0 })
		sentBefore := snd.total()

		// Another owner takes the partition over (as after a long pause).
		name := PartitionLease("s", 0)
		ls, _ := leases.List(context.Background(), name, time.Now())
		if err := leases.Release(context.Background(), ls[0]); err != nil {
			t.Fatal(err)
		}
		if _, err := leases.Acquire(context.Background(), name, "x", time.Hour, time.Now()); err != nil {
			t.Fatal(err)
		}
		eventually(t, 5*time.Second, "stale outcomes", func() bool { return j.results()[ResultStale] == 3 })
		advance(30 * time.Second)
		if snd.total() != sentBefore {
			t.Errorf("sent %d more records after losing the lease", snd.total()-sentBefore)
		}
		if r := j.results(); r[ResultRetried]+r[ResultOK] != 0 {
			t.Errorf("outcomes %v recorded after losing the lease", r)
		}
		// The records are still claimed under the old token: nothing was
		// released or completed by the old owner.
		recs, err := store.Claim(context.Background(), stores.ClaimRequest{Session: "s", Token: 1 << 40,
			Limit: 10, Now: time.Now(), Until: time.Now().Add(time.Minute)})
		if err != nil || len(recs) != 3 {
			t.Errorf("claim after the claim deadline: %d records, %v; want 3", len(recs), err)
		}
		if err := stop(); err != nil {
			t.Fatalf("Run: %v", err)
		}
	})
}
