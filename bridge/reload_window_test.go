package bridge

import (
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
	dto "github.com/prometheus/client_model/go"

	"github.com/gobridge/gobridge/stores"
)

// sessionRoute is a shared_outbox route in session s (YAML list item).
func sessionRoute(id, topic, sender, policy string) string {
	return fmt.Sprintf(`
  - {id: %s, receiver: edge, topic: %q, sender: %s, delivery_mode: shared_outbox,
     session: {id: s, drain_strategy: {type: fixed_poll, interval: 50ms}}, policy: {%s}}`, id, topic, sender, policy)
}

// noDeadLetters fails the test with the reasons of the dead letters b's
// outbox holds.
func noDeadLetters(t *testing.T, b *Bridge) {
	t.Helper()
	dead, _, err := b.store.Dead(t.Context(), stores.DeadQuery{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	var reasons []string
	for _, r := range dead {
		reasons = append(reasons, r.Envelope.ID+" of "+r.Route+": "+r.DeadReason)
	}
	if len(reasons) > 0 {
		t.Fatalf("%d dead letters:\n%s", len(dead), strings.Join(reasons, "\n"))
	}
}

// TestBridge_ReloadRemovingARouteLetsItDeliverWhatItTook: route A is
// removed by a reload (route N takes its topic, in the same session)
// while A is still taking a message in (it waits for room in the
// outbox). That message was taken under the old configuration: route A
// delivers it before the reload completes; a message published during the
// reload goes to N; nothing becomes an "unknown route" dead letter.
func TestBridge_ReloadRemovingARouteLetsItDeliverWhatItTook(t *testing.T) {
	t.Parallel()
	kSink, aSink, nSink := newSink(t), newSink(t), newSink(t)
	kSink.down.Store(true)
	aSink.down.Store(true)
	addr, db := freeAddr(t), filepath.Join(t.TempDir(), "outbox.db")
	senders := fmt.Sprintf(`
  - {id: k, type: http, options: {url: %q}}
  - {id: a, type: http, options: {url: %q}}
  - {id: n, type: http, options: {url: %q}}`, kSink.srv.URL, aSink.srv.URL, nSink.srv.URL)
	k := sessionRoute("K", "k/#", "k", "max_outbox_depth: 1")
	before := reloadConfig(t, "window", addr, db, senders, k+sessionRoute("A", "a/#", "a", "max_outbox_depth: 1"))
	after := reloadConfig(t, "window", addr, db, senders, k+sessionRoute("N", "a/#", "n", "max_outbox_depth: 1"))
	rt := startBridge(t, before)
	pub := publisher(t, "tcp://"+addr, "window-pub")
	waitTokens(t, []paho.Token{pub.Publish("k/x", 1, false, "k-0")}, 20*time.Second) // session s is full
	held := pub.Publish("a/x", 1, false, "a-before")
	waitFor(t, 20*time.Second, "route A to take a-before", func() bool {
		var m dto.Metric
		_ = rt.metrics.routeReceived.WithLabelValues("A").Write(&m)
		return m.GetCounter().GetValue() == 1
	})

	reloaded := make(chan error, 1)
	go func() { reloaded <- rt.Reload(t.Context(), after) }()
	kSink.down.Store(false) // room: A commits a-before
	waitTokens(t, []paho.Token{held}, 20*time.Second)
	during := pub.Publish("a/x", 1, false, "a-during")
	aSink.down.Store(false)
	if err := <-reloaded; err != nil {
		t.Fatalf("Reload: %v", err)
	}
	waitTokens(t, []paho.Token{during}, 20*time.Second)
	waitFor(t, 20*time.Second, "a-during at N", func() bool { return nSink.count("a-during") == 1 })
	noDeadLetters(t, rt)
	waitFor(t, 20*time.Second, "a-before at A", func() bool { return aSink.count("a-before") == 1 })
	if aSink.count("a-during") != 0 {
		t.Error("a message published during the reload went to the removed route")
	}
}

// TestBridge_ReloadReplacingARouteUnderTraffic replaces route A by route N
// (same topic, same session) while a publisher sends at a steady rate:
// every acknowledged message is delivered, by A or N, and none becomes a
// dead letter (N's first records must not reach the old session's
// drainer, which does not know N).
func TestBridge_ReloadReplacingARouteUnderTraffic(t *testing.T) {
	t.Parallel()
	aSink, nSink := newSink(t), newSink(t)
	addr, db := freeAddr(t), filepath.Join(t.TempDir(), "outbox.db")
	senders := fmt.Sprintf(`
  - {id: a, type: http, options: {url: %q}}
  - {id: n, type: http, options: {url: %q}}`, aSink.srv.URL, nSink.srv.URL)
	rt := startBridge(t, reloadConfig(t, "traffic", addr, db, senders, sessionRoute("A", "a/#", "a", "")))
	steady := startSteady(t, addr, "traffic-pub", "a/x", "a")
	waitFor(t, 20*time.Second, "A delivering", func() bool { return aSink.distinct() > 20 })
	for err := rt.Reload(t.Context(), reloadConfig(t, "traffic", addr, db, senders, sessionRoute("N", "a/#", "n", ""))); err != nil; {
		t.Fatalf("Reload: %v", err)
	}
	waitFor(t, 20*time.Second, "N delivering", func() bool { return nSink.distinct() > 20 })
	acked := steady.acked(t)
	noDeadLetters(t, rt)
	waitFor(t, 30*time.Second, "every acknowledged message", func() bool {
		for _, p := range acked {
			if aSink.count(p)+nSink.count(p) == 0 {
				return false
			}
		}
		return true
	})
}

// TestBridge_ReloadRetriesAReceiverThatFailedToStart: a reload moves the
// listener to a port that is taken, so the new listener fails; /readyz
// says so. Once the port is free, a reload of the same file brings the
// listener up (its config did not change, but it is not running).
func TestBridge_ReloadRetriesAReceiverThatFailedToStart(t *testing.T) {
	t.Parallel()
	s := newSink(t)
	addr, db := freeAddr(t), filepath.Join(t.TempDir(), "outbox.db")
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	senders := fmt.Sprintf(`
  - {id: a, type: http, options: {url: %q}}`, s.srv.URL)
	rt := startBridge(t, reloadConfig(t, "retry", addr, db, senders, sessionRoute("A", "a/#", "a", "")))
	waitFor(t, 20*time.Second, "/readyz ready", func() bool { return rt.Ready(t.Context()).Ready })
	moved := reloadConfig(t, "retry", taken.Addr().String(), db, senders, sessionRoute("A", "a/#", "a", ""))
	if err := rt.Reload(t.Context(), moved); err != nil {
		t.Fatalf("Reload: %v", err)
	}
	waitFor(t, 20*time.Second, "/readyz to report the listener that failed", func() bool {
		r := rt.Ready(t.Context())
		return !r.Ready && strings.Contains(strings.Join(r.Reasons, "; "), "receiver edge: disconnected: listen on "+taken.Addr().String())
	})
	_ = taken.Close()
	if err := rt.Reload(t.Context(), moved); err != nil {
		t.Fatalf("Reload: %v", err)
	}
	pub := publisher(t, "tcp://"+taken.Addr().String(), "retry-pub")
	waitTokens(t, []paho.Token{pub.Publish("a/x", 1, false, "after")}, 20*time.Second)
	waitFor(t, 20*time.Second, "the message", func() bool { return s.count("after") == 1 })
	waitFor(t, 20*time.Second, "/readyz ready", func() bool { return rt.Ready(t.Context()).Ready })
}
