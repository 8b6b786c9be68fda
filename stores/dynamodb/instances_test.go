package dynamodb_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/gobridge/gobridge/message"
	"github.com/gobridge/gobridge/stores"
	"github.com/gobridge/gobridge/stores/dynamodb"
)

// instance is one gobridge process's view of the shared tables: its own
// client, store and lease store.
type instance struct {
	name   string
	s      *dynamodb.Store
	leases *dynamodb.Leases
}

func newInstance(t *testing.T, name string) *instance {
	t.Helper()
	_, table := sharedTable(t)
	c := newClient(t, nil)
	l, err := dynamodb.OpenLeases(t.Context(), dynamodb.Options{LeaseTable: table, Client: c})
	if err != nil {
		t.Fatal(err)
	}
	return &instance{name: name, s: openStore(t, c, table), leases: l}
}

// drain claims and completes partition part under lease le until it is
// empty at now, and returns the IDs it completed.
func (in *instance) drain(t *testing.T, session string, part int, le stores.Lease, now time.Time) []string {
	t.Helper()
	var done []string
	for {
		got, err := in.s.Claim(t.Context(), stores.ClaimRequest{
			Session: session, Partition: part, Token: le.Token, Limit: 25, Now: now, Until: now.Add(30 * time.Second),
		})
		if err != nil {
			t.Fatalf("%s: Claim: %v", in.name, err)
		}
		if len(got) == 0 {
			return done
		}
		if err := in.s.Complete(t.Context(), got...); err != nil {
			t.Fatalf("%s: Complete: %v", in.name, err)
		}
		for _, r := range got {
			done = append(done, r.Envelope.ID)
		}
	}
}

func TestStore_TwoInstancesShareAnOutbox(t *testing.T) {
	t.Parallel()
	const parts, perInstance = 4, 100
	a, b := newInstance(t, "a"), newInstance(t, "b")
	session := uniqueName("sess-")
	lease := func(p int) string { return fmt.Sprintf("%s/%d", session, p) }
	ttl := 10 * time.Second

	// Both instances ingest at once (a $share/ subscription splits the
	// messages), with ordering keys spread over the partitions.
	var wg sync.WaitGroup
	for _, in := range []*instance{a, b} {
		wg.Go(func() {
			for i := 0; i < perInstance; i += 10 {
				var batch []stores.Record
				for j := range 10 {
					key := fmt.Sprintf("dev-%s-%d", in.name, (i+j)%7)
					batch = append(batch, stores.Record{
						Session: session, Route: "r", Partition: stores.PartitionOf(key, parts),
						Envelope:  message.Envelope{ID: message.NewID(), Payload: []byte("x"), ReceivedAt: t0, Key: key},
						CreatedAt: t0, NextAttemptAt: t0,
					})
				}
				if err := in.s.Append(t.Context(), batch...); err != nil {
					t.Errorf("%s: Append: %v", in.name, err)
					return
				}
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}

	// a holds partitions 0 and 1, b holds 2 and 3.
	held := map[int]stores.Lease{}
	for p := range parts {
		in := a
		if p >= 2 {
			in = b
		}
		le, err := in.leases.Acquire(t.Context(), lease(p), in.name, ttl, t0)
		if err != nil {
			t.Fatalf("%s: Acquire %d: %v", in.name, p, err)
		}
		held[p] = le
	}
	// a claims a batch of partition 0 and stalls (SIGSTOP, GC pause...).
	stalled, err := a.s.Claim(t.Context(), stores.ClaimRequest{
		Session: session, Partition: 0, Token: held[0].Token, Limit: 10, Now: t0, Until: t0.Add(30 * time.Second),
	})
	if err != nil || len(stalled) == 0 {
		t.Fatalf("a: Claim = %d, %v", len(stalled), err)
	}
	completed := map[string]int{}
	for _, p := range []int{2, 3} {
		for _, id := range b.drain(t, session, p, held[p], t0) {
			completed[id]++
		}
	}
	// b may not take a's partitions while a's leases run.
	if _, err := b.leases.Acquire(t.Context(), lease(0), "b", ttl, t0.Add(ttl/2)); !errors.Is(err, stores.ErrLeaseHeld) {
		t.Fatalf("b took partition 0 while a held it: %v", err)
	}
	// After the lease and the claims lapse, b takes over and drains.
	later := t0.Add(time.Minute)
	for _, p := range []int{0, 1} {
		le, err := b.leases.Acquire(t.Context(), lease(p), "b", ttl, later)
		if err != nil {
			t.Fatalf("b: takeover of %d: %v", p, err)
		}
		if le.Token <= held[p].Token {
			t.Fatalf("takeover token %d not above %d", le.Token, held[p].Token)
		}
		for _, id := range b.drain(t, session, p, le, later) {
			completed[id]++
		}
	}
	// a wakes up: everything it still holds was taken over.
	if err := a.s.Complete(t.Context(), stalled...); !errors.Is(err, stores.ErrStaleToken) {
		t.Fatalf("a: Complete after takeover = %v, want ErrStaleToken", err)
	}
	if _, err := a.leases.Renew(t.Context(), held[0], ttl, later); !errors.Is(err, stores.ErrLeaseLost) {
		t.Fatalf("a: Renew after takeover = %v, want ErrLeaseLost", err)
	}
	if len(completed) != 2*perInstance {
		t.Errorf("completed %d distinct records, want %d", len(completed), 2*perInstance)
	}
	for id, n := range completed {
		if n != 1 {
			t.Errorf("record %s completed %d times", id, n)
		}
	}
	if st, err := b.s.Stats(t.Context(), session); err != nil || st.Pending != 0 {
		t.Errorf("Stats = %+v, %v; want empty", st, err)
	}
}
