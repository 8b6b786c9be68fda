package bridge

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gobridge/gobridge/routes"
	"github.com/gobridge/gobridge/stores"
)

// joinGate is instance A's own store, except that once armed, the next
// member lease that A takes for session (its new drainer group joining
// after a reload) waits until the other instance, other, holds every
// partition lease of the session: the other instance takes the partitions
// A's old group released before A's new group asks for its share back.
type joinGate struct {
	stores.Store
	session, other string
	partitions     int
	armed          atomic.Bool
	handed         atomic.Int32 // times the other instance held every partition when A joined
}

func (g *joinGate) Acquire(ctx context.Context, name, owner string, ttl time.Duration, now time.Time) (stores.Lease, error) {
	if strings.HasPrefix(name, "member/"+g.session+"/") && g.armed.CompareAndSwap(true, false) {
		// The caller's tick ctx may end meanwhile: the gate's wait is not
		// the caller's, so the lease is taken as if asked now.
		bg := context.WithoutCancel(ctx)
		deadline := time.Now().Add(60 * time.Second)
		for !g.otherHoldsAll(bg) && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond) // polling the lease table, not synchronisation
		}
		if g.otherHoldsAll(bg) {
			g.handed.Add(1)
		}
		ctx, cancel := context.WithTimeout(bg, ttl/3)
		defer cancel()
		return g.Store.Acquire(ctx, name, owner, ttl, time.Now())
	}
	return g.Store.Acquire(ctx, name, owner, ttl, now)
}

func (g *joinGate) otherHoldsAll(ctx context.Context) bool {
	return g.held(ctx, g.other) == g.partitions
}

// held counts the session's partition leases owner holds.
func (g *joinGate) held(ctx context.Context, owner string) int {
	ls, err := g.Store.List(ctx, "outbox/"+g.session+"/", time.Now())
	n := 0
	for _, l := range ls {
		if l.Owner == owner {
			n++
		}
	}
	if err != nil {
		return -1
	}
	return n
}

// TestBridge_ReloadHandsPartitionsOverBetweenInstances: two instances, A
// and B, share a session of 4 partitions on DynamoDB, each taking a steady
// stream of messages of two keys on its own listener. Reloads on A replace
// A's drainer group (a route added to the session, then removed): A's
// partitions go to B and come back as A's new group joins again. Every
// acknowledged message is delivered, none is dead-lettered, and each key's
// first deliveries come in publish order.
func TestBridge_ReloadHandsPartitionsOverBetweenInstances(t *testing.T) {
	t.Parallel()
	s := newSink(t)
	store := dynamoStore(t)
	config := func(id, addr string, withN bool) *routes.Config {
		rs := `
  - {id: R, receiver: edge, topic: "k/#", sender: sink, delivery_mode: shared_outbox, ordering_key: "{topic}",
     session: {id: s, partitions: 4, drain_interval: 100ms}}`
		if withN {
			rs += `
  - {id: N, receiver: edge, topic: "n/#", sender: sink, delivery_mode: shared_outbox,
     session: {id: s, partitions: 4, drain_interval: 100ms}}`
		}
		return parseConfig(t, fmt.Sprintf(`version: 1
bridge: {id: %s, admin: {listen: ""}, shutdown_timeout: 10s, lease_ttl: 12s}
stores: {outbox: %s}
receivers:
  - {id: edge, type: mqtt_listener, options: {listen: %q}, topics: [{topic: "#", qos: 1}]}
senders:
  - {id: sink, type: http, options: {url: %q}}
routes:
%s
`, id, store, addr, s.srv.URL, rs))
	}
	addrA, addrB := freeAddr(t), freeAddr(t)
	b := startBridge(t, config("b", addrB, false))
	a, err := New(config("a", addrA, false), Options{Logger: testLogger(t), Stdout: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	gate := &joinGate{Store: a.store, session: "s", other: b.owner, partitions: 4}
	a.store = gate // the groups A's reloads build take their leases through it
	startRun(t, a)
	for _, x := range []*Bridge{a, b} {
		waitFor(t, 60*time.Second, "both instances ready", func() bool { return x.Ready(t.Context()).Ready })
	}
	var pubs []*steadyPublisher
	for k, addr := range []string{addrA, addrA, addrB, addrB} {
		pubs = append(pubs, startSteadyWith(t, addr, fmt.Sprintf("takeover-pub-%d", k), fmt.Sprintf("k/%d", k),
			40*time.Millisecond, func(i int) string { return msgID(k*100000 + i) }))
	}
	waitFor(t, 60*time.Second, "the first deliveries", func() bool { return s.distinct() > 100 })
	balanced := func() {
		waitFor(t, 60*time.Second, "A and B holding two partitions each", func() bool {
			return gate.held(t.Context(), a.owner) == 2 && gate.held(t.Context(), b.owner) == 2
		})
	}
	for i := range 4 {
		balanced()
		gate.armed.Store(true)
		if err := a.Reload(t.Context(), config("a", addrA, i%2 == 0)); err != nil {
			t.Fatalf("Reload %d: %v", i, err)
		}
		got := s.distinct()
		waitFor(t, 60*time.Second, "deliveries after the reload", func() bool { return s.distinct() > got+40 })
	}
	balanced()
	if n := gate.handed.Load(); n != 4 {
		t.Errorf("B held every partition when A's new group joined after %d of 4 reloads", n)
	}
	var acked []string
	for _, p := range pubs {
		acked = append(acked, p.acked(t)...)
	}
	var missing int
	waitFor(t, 120*time.Second, "every acknowledged message delivered", func() bool {
		missing = 0
		for _, m := range acked {
			if s.count(m) == 0 {
				missing++
			}
		}
		return missing == 0
	})
	noDeadLetters(t, a)
	waitFor(t, 60*time.Second, "nothing pending", func() bool { return sessionStats(t, a, "s").Live == 0 })
	s.mu.Lock()
	order := append([]string(nil), s.order...)
	s.mu.Unlock()
	checkKeyOrder(t, order, func(i int) int { return i / 100000 })
	t.Logf("%d acknowledged, %d deliveries, stale outcomes: A %v, B %v", len(acked), s.total.Load(),
		counted(a.metrics.stale.WithLabelValues("R")), counted(b.metrics.stale.WithLabelValues("R")))
}
