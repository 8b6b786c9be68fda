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

// crashable wraps a real store; after crash every call fails, as if the
// process had died (nothing is settled or released).
type crashable struct {
	stores.Store
	crashed atomic.Bool
}

func (c *crashable) Write(ctx context.Context, b *stores.Batch) error {
	if c.crashed.Load() {
		return errCrashed
	}
	return c.Store.Write(ctx, b)
}

func (c *crashable) Claim(ctx context.Context, req stores.ClaimRequest) ([]stores.Record, error) {
	if c.crashed.Load() {
		return nil, errCrashed
	}
	return c.Store.Claim(ctx, req)
}

func (c *crashable) Acquire(ctx context.Context, name, owner string, ttl time.Duration, now time.Time) (stores.Lease, error) {
	if c.crashed.Load() {
		return stores.Lease{}, errCrashed
	}
	return c.Store.Acquire(ctx, name, owner, ttl, now)
}

func (c *crashable) Renew(ctx context.Context, le stores.Lease, ttl time.Duration, now time.Time) (stores.Lease, error) {
	if c.crashed.Load() {
		return stores.Lease{}, errCrashed
	}
	return c.Store.Renew(ctx, le, ttl, now)
}

func (c *crashable) Release(ctx context.Context, le stores.Lease) error {
	if c.crashed.Load() {
		return errCrashed
	}
	return c.Store.Release(ctx, le)
}

// holders counts the partition leases each owner holds.
func holders(t *testing.T, store stores.Store) map[string]int {
	t.Helper()
	ls, err := store.List(context.Background(), "outbox/s/", time.Now())
	if err != nil {
		t.Fatalf("list leases: %v", err)
	}
	m := map[string]int{}
	for _, l := range ls {
		m[l.Owner]++
	}
	return m
}

func TestGroup_OnlyTheHolderSendsAndATakeoverFencesTheOldOwner(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := memory.New(memory.Options{})
		hang := make(chan struct{})
		sa := newScriptSender(1, func(context.Context, *message.Envelope, int) error {
			<-hang // the old owner hangs mid-send, then its process dies
			return nil
		})
		sb := newScriptSender(1, nil)
		a := &crashable{Store: store}
		ga, _ := newGroupOn(t, testOptions(t, sa, testPolicy(), nil), &claimCounter{Store: a})
		optsB := testOptions(t, sb, testPolicy(), nil)
		optsB.Owner = "b"
		gb, wb := newGroupOn(t, optsB, &claimCounter{Store: store})

		recs, _ := records(5, nil)
		wb.append(recs...)
		stopA := running(t, ga)
		eventually(t, time.Second, "a holds the partition", func() bool { return holders(t, store)["a"] == 1 })
		stopB := running(t, gb)
		eventually(t, 2*time.Second, "a is sending", func() bool { return sa.total() > 0 })

		advance(10 * time.Second) // while a holds the lease, b sends nothing
		if sb.total() != 0 || holders(t, store)["b"] != 0 {
			t.Fatalf("b sent %d records while a held the lease", sb.total())
		}

		a.crashed.Store(true) // a dies: no renew, no release
		eventually(t, time.Minute, "b took over and delivered", func() bool {
			return holders(t, store)["b"] == 1 && live(t, store) == 0
		})
		if sb.total() != 5 {
			t.Errorf("b sent %d records, want all 5", sb.total())
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
		store := &claimCounter{Store: memory.New(memory.Options{})}
		group := func(owner string) *Group {
			opts := testOptions(t, newScriptSender(1, nil), testPolicy(), nil)
			opts.Owner, opts.Partitions = owner, 4
			g, _ := newGroupOn(t, opts, store)
			return g
		}
		stopA := running(t, group("a"))
		eventually(t, time.Second, "a alone takes all", func() bool { return holders(t, store)["a"] == 4 })
		stopB := running(t, group("b"))
		eventually(t, 10*time.Second, "a and b share", func() bool {
			h := holders(t, store)
			return h["a"] == 2 && h["b"] == 2
		})
		if err := stopB(); err != nil {
			t.Fatalf("Run b: %v", err)
		}
		eventually(t, 10*time.Second, "a takes b's share back", func() bool { return holders(t, store)["a"] == 4 })
		if err := stopA(); err != nil {
			t.Fatalf("Run a: %v", err)
		}
	})
}

func TestGroup_StopsAtOnceWhenItsLeaseIsLost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		snd := newScriptSender(1, func(ctx context.Context, _ *message.Envelope, _ int) error {
			<-ctx.Done() // in flight until the drainer cancels it
			return ctx.Err()
		})
		j := newJournal()
		g, w, store := newGroup(t, testOptions(t, snd, testPolicy(), j))
		recs, _ := records(3, nil)
		w.append(recs...)
		stop := running(t, g)
		eventually(t, time.Second, "sending", func() bool { return snd.total() > 0 })
		sentBefore := snd.total()

		// Another owner takes the partition over (as after a long pause).
		name := stores.PartitionLease("s", 0)
		ls, _ := store.List(context.Background(), name, time.Now())
		if err := store.Release(context.Background(), ls[0]); err != nil {
			t.Fatal(err)
		}
		if _, err := store.Acquire(context.Background(), name, "x", time.Hour, time.Now()); err != nil {
			t.Fatal(err)
		}
		eventually(t, 5*time.Second, "the loop stopped", func() bool { return g.part(0) == nil })
		advance(30 * time.Second)
		if snd.total() != sentBefore {
			t.Errorf("sent %d more records after losing the lease", snd.total()-sentBefore)
		}
		if r := j.results(); r[ResultTransient]+r[ResultOK] != 0 {
			t.Errorf("outcomes %v recorded after losing the lease", r)
		}
		if live(t, store) != 3 {
			t.Errorf("live = %d, want the 3 records left for the new owner", live(t, store))
		}
		if err := stop(); err != nil {
			t.Fatalf("Run: %v", err)
		}
	})
}
