package bridge

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gobridge/gobridge/stores"
)

// handoverGate is the bridge's own store, except that once armed it opens
// the moment in which a reload replaces a session's drainer group and makes
// the writer lose the race in it every run: the old group's member lease is
// released (the last thing it does before Run returns and the writer is
// given the new groups) only once a write of records has begun, which
// therefore reserved them with the old groups; that write waits until the
// new group has claimed (or until someone waits for the writer to flush).
type handoverGate struct {
	stores.Store
	w         *writer
	session   string
	armed     atomic.Bool
	releasing atomic.Bool   // the old group is releasing its member lease
	held      atomic.Bool   // a write was held
	entered   chan struct{} // closed when the held write began
	claimed   chan struct{} // closed when a claim ran after it
	claimOnce sync.Once
}

func newHandoverGate(b *Bridge, session string) *handoverGate {
	g := &handoverGate{Store: b.store, w: b.writer, session: session, entered: make(chan struct{}), claimed: make(chan struct{})}
	b.store, b.writer.store = g, g // the groups a reload builds claim through it too
	return g
}

func (g *handoverGate) Release(ctx context.Context, l stores.Lease) error {
	if g.armed.Load() && strings.HasPrefix(l.Name, "member/"+g.session+"/") {
		g.releasing.Store(true)
		select {
		case <-g.entered:
		case <-time.After(30 * time.Second): // liveness bound; the test then fails on held
		}
	}
	return g.Store.Release(ctx, l)
}

func (g *handoverGate) Write(ctx context.Context, b *stores.Batch) error {
	if g.releasing.Load() && len(b.Append) > 0 && g.held.CompareAndSwap(false, true) {
		close(g.entered)
		deadline := time.Now().Add(30 * time.Second)
		for !g.flushWaited() && time.Now().Before(deadline) {
			select {
			case <-g.claimed:
				return g.Store.Write(ctx, b)
			case <-time.After(5 * time.Millisecond): // polling the writer's waiters, not synchronisation
			}
		}
	}
	return g.Store.Write(ctx, b)
}

func (g *handoverGate) Claim(ctx context.Context, req stores.ClaimRequest) ([]stores.Record, error) {
	recs, err := g.Store.Claim(ctx, req)
	if g.held.Load() && req.Session == g.session {
		g.claimOnce.Do(func() { close(g.claimed) })
	}
	return recs, err
}

// flushWaited reports whether someone waits for the writer to flush.
func (g *handoverGate) flushWaited() bool {
	g.w.mu.Lock()
	defer g.w.mu.Unlock()
	return len(g.w.waiters) > 0
}

// TestBridge_ReloadOfASessionKeepsKeyOrderOfItsKeptRoute: route A (ordering
// key {topic}) takes a steady stream of messages of one key while reloads
// add routes to its session, so that the session's drainer group is
// replaced while A keeps running. A write of A's records that the writer
// began with the old groups (appended unclaimed: the old partition is gone)
// may commit after the new group's first claim; the new group then takes
// the next records on the hot path and sends them before the earlier ones,
// which wait for its next poll. Every acknowledged message must be
// delivered, and the first deliveries of the key in publish order. (A claim
// limit larger than any backlog here makes the new group's first claim its
// last look at the store before the hot path.)
func TestBridge_ReloadOfASessionKeepsKeyOrderOfItsKeptRoute(t *testing.T) {
	t.Parallel()
	s := newSink(t)
	addr, db := freeAddr(t), filepath.Join(t.TempDir(), "outbox.db")
	senders := fmt.Sprintf(`
  - {id: a, type: http, options: {url: %q}}`, s.srv.URL)
	route := func(id, topic string) string {
		return fmt.Sprintf(`
  - {id: %s, receiver: edge, topic: %q, sender: a, delivery_mode: shared_outbox, ordering_key: "{topic}",
     session: {id: s, batch_size: 10000, drain_strategy: {type: fixed_poll, interval: 1s}}}`, id, topic)
	}
	config := func(rs ...string) string { return strings.Join(append([]string{route("A", "k/#")}, rs...), "") }
	rt, err := New(reloadConfig(t, "handover", addr, db, senders, config()), Options{Logger: testLogger(t), Stdout: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	gate := newHandoverGate(rt, "s")
	startRun(t, rt)
	waitFor(t, 20*time.Second, "/readyz ready", func() bool { return rt.Ready(t.Context()).Ready })
	// A first reload replaces the group New built with one that uses the gate.
	if err := rt.Reload(t.Context(), reloadConfig(t, "handover", addr, db, senders, config(route("N", "n/#")))); err != nil {
		t.Fatalf("Reload: %v", err)
	}
	steady := startSteadyWith(t, addr, "handover-pub", "k/1", 2*time.Millisecond, msgID)
	waitFor(t, 20*time.Second, "A delivering", func() bool { return s.distinct() > 20 })

	gate.armed.Store(true)
	if err := rt.Reload(t.Context(), reloadConfig(t, "handover", addr, db, senders, config(route("N", "n/#"), route("M", "m/#")))); err != nil {
		t.Fatalf("Reload: %v", err)
	}
	if !gate.held.Load() {
		t.Fatal("no write began while the old group released its lease: the race was not exercised")
	}
	sent := steady.sent()
	waitFor(t, 20*time.Second, "more messages", func() bool { return steady.sent() > sent+50 })
	acked := steady.acked(t)
	waitFor(t, 30*time.Second, "every acknowledged message", func() bool {
		for _, m := range acked {
			if s.count(m) == 0 {
				return false
			}
		}
		return true
	})
	noDeadLetters(t, rt)
	s.mu.Lock()
	order := append([]string(nil), s.order...)
	s.mu.Unlock()
	checkKeyOrder(t, order, func(int) int { return 1 })
}
