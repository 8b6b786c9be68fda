package bridge

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
	"github.com/prometheus/client_golang/prometheus"
)

// fallbackBridge runs a direct_or_outbox route with ordering key {topic}
// from an embedded listener to sink, on a SQLite outbox; policy adds to
// the route's policy ("k: v, ").
func fallbackBridge(t *testing.T, s *sink, directTimeout, policy string) (*Bridge, string, *prometheus.Registry) {
	t.Helper()
	addr := freeAddr(t)
	store := fmt.Sprintf("{type: sqlite, options: {path: %q}}", filepath.Join(t.TempDir(), "outbox.db"))
	cfg := parseConfig(t, listenerConfig(addr, "", store,
		fmt.Sprintf(`  - {id: sink, type: http, options: {url: %q, timeout: 2s}}`, s.srv.URL), `
  - id: hybrid
    receiver: edge
    topic: "#"
    sender: sink
    delivery_mode: direct_or_outbox
    ordering_key: "{topic}"
    processors: [{type: idempotency_key, from: "{payload.id}"}]
    session: {id: s1, drain_strategy: {type: fixed_poll, interval: 100ms}}
    policy: {`+policy+`direct_timeout: `+directTimeout+`, backoff: {initial_interval: 50ms, max_interval: 200ms}}`))
	reg := prometheus.NewRegistry()
	b, err := New(cfg, Options{Logger: testLogger(t), Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	startRun(t, b)
	return b, addr, reg
}

func TestFallback_AHealthyTargetGetsEveryMessageWithoutAStoreWrite(t *testing.T) {
	t.Parallel()
	s := newSink(t)
	_, addr, reg := fallbackBridge(t, s, "20s", "") // however loaded the machine, a healthy target answers in time
	pub := publisher(t, "tcp://"+addr, "fb-healthy")
	var toks []paho.Token
	const n = 200
	for i := range n {
		toks = append(toks, pub.Publish(fmt.Sprintf("line/%d", i%4), 1, false, fmt.Sprintf(`{"id": %q}`, msgID(i))))
	}
	waitTokens(t, toks, 20*time.Second)
	waitFor(t, 10*time.Second, "every message at the target", func() bool { return s.distinct() == n })
	direct := counter(t, reg, "gobridge_delivery_direct_total", "hybrid")
	fallback := counter(t, reg, "gobridge_delivery_fallback_total", "hybrid")
	persisted := counter(t, reg, "gobridge_route_persisted_total", "hybrid")
	if direct != n || fallback != 0 || persisted != 0 {
		t.Errorf("direct %v, fallback %v, persisted %v; want %d direct and no store write", direct, fallback, persisted, n)
	}
}

func TestFallback_AFailingTargetDoesNotHoldTheSourceAndOrderHolds(t *testing.T) {
	t.Parallel()
	s := newSink(t)
	// A direct send that times out may still reach the target later than
	// the messages after it (at-least-once); the timeout is long enough
	// that only the 503s of the outage send messages to the outbox here.
	b, addr, reg := fallbackBridge(t, s, "20s", "")
	pub := publisher(t, "tcp://"+addr, "fb-down")
	var toks []paho.Token
	publish := func(from, to int) {
		for i := from; i < to; i++ {
			toks = append(toks, pub.Publish(fmt.Sprintf("line/%d", i%4), 1, false, fmt.Sprintf(`{"id": %q}`, msgID(i))))
		}
	}
	publish(0, 40) // healthy: direct
	waitTokens(t, toks, 20*time.Second)
	waitFor(t, 10*time.Second, "the first messages at the target", func() bool { return s.distinct() == 40 })

	s.down.Store(true) // 503: target errors, the messages go to the outbox
	publish(40, 240)
	waitTokens(t, toks, 20*time.Second) // acknowledged although the target is down: nothing holds the source
	if st := sessionStats(t, b, "s1"); st.Live == 0 {
		t.Fatalf("nothing in the outbox with the target down")
	}
	s.hook = func(string) { time.Sleep(5 * time.Millisecond) } // a slow target: the outbox drains for a while
	s.down.Store(false)
	// While the outbox drains (the sender is up again), new messages of a
	// key with records in the outbox go there too, behind them.
	waitFor(t, 10*time.Second, "the outbox draining", func() bool { return s.distinct() > 50 })
	publish(240, 300)
	waitTokens(t, toks, 20*time.Second)
	waitFor(t, 30*time.Second, "every message at the target", func() bool { return s.distinct() == 300 })
	// The store's count first, then the bridge's: it applies a batch's
	// settlements just after their commit.
	waitFor(t, 10*time.Second, "the outbox empty", func() bool {
		return sessionStats(t, b, "s1").Live == 0 && b.limits.live("s1") == 0
	})
	publish(300, 340) // healthy again, outbox empty: direct again
	waitTokens(t, toks, 20*time.Second)
	waitFor(t, 10*time.Second, "the last messages at the target", func() bool { return s.distinct() == 340 })

	s.mu.Lock()
	last := map[string]int{}
	for _, body := range s.order {
		var i int
		if _, err := fmt.Sscanf(strings.TrimPrefix(body, `{"id": "m-`), "%d", &i); err != nil {
			t.Fatalf("body %q: %v", body, err)
		}
		key := fmt.Sprint(i % 4)
		if prev, ok := last[key]; ok && i < prev {
			t.Errorf("line/%s: message %d delivered after %d", key, i, prev)
		}
		last[key] = max(last[key], i)
	}
	s.mu.Unlock()
	fallback := counter(t, reg, "gobridge_delivery_fallback_total", "hybrid")
	direct := counter(t, reg, "gobridge_delivery_direct_total", "hybrid")
	if fallback < 200 || direct < 80 {
		t.Errorf("fallback %v, direct %v; want the outage's 200+ through the outbox and 80 direct", fallback, direct)
	}
}

// counter returns the value of counter name with label route in reg.
func counter(t *testing.T, reg *prometheus.Registry, name, route string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "route" && l.GetValue() == route {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	t.Fatalf("no %s{route=%q}", name, route)
	return 0
}

// TestFallback_AHangingTargetCostsOneDirectTimeout: a target that does not
// answer holds a message for direct_timeout only; then the message goes to
// the outbox and its source is acknowledged; the drainer delivers it once
// the target answers again.
func TestFallback_AHangingTargetCostsOneDirectTimeout(t *testing.T) {
	t.Parallel()
	s := newSink(t)
	release := make(chan struct{})
	s.hook = func(string) { <-release }
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})
	b, addr, reg := fallbackBridge(t, s, "300ms", "")
	pub := publisher(t, "tcp://"+addr, "fb-hang")
	var toks []paho.Token
	for i := range 8 {
		toks = append(toks, pub.Publish(fmt.Sprintf("line/%d", i%2), 1, false, fmt.Sprintf(`{"id": %q}`, msgID(i))))
	}
	waitTokens(t, toks, 20*time.Second) // acknowledged while the target hangs
	if fallback := counter(t, reg, "gobridge_delivery_fallback_total", "hybrid"); fallback < 2 {
		t.Errorf("fallback %v, want the hanging keys' messages in the outbox", fallback)
	}
	if st := sessionStats(t, b, "s1"); st.Live == 0 {
		t.Fatalf("nothing in the outbox while the target hangs")
	}
	close(release)
	waitFor(t, 30*time.Second, "every message at the target", func() bool { return s.distinct() == 8 })
	waitFor(t, 10*time.Second, "the outbox empty", func() bool { return sessionStats(t, b, "s1").Live == 0 })
}
