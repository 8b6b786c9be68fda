package bridge

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
	"github.com/prometheus/client_golang/prometheus"
)

// Records past their ttl count as expired and, by on_expired, as dead
// letters or drops, as README's metrics table says.
func TestMetrics_ExpiredRecordsCountAsDeadLetteredOrDropped(t *testing.T) {
	t.Parallel()
	s := newSink(t)
	s.down.Store(true) // nothing is delivered: every record expires
	addr := freeAddr(t)
	store := fmt.Sprintf("{type: sqlite, options: {path: %q}}", filepath.Join(t.TempDir(), "outbox.db"))
	route := func(id, onExpired string) string {
		return fmt.Sprintf(`
  - id: %s
    receiver: edge
    topic: "#"
    sender: sink
    delivery_mode: shared_outbox
    session: {id: s-%s, drain_strategy: {type: fixed_poll, interval: 50ms}}
    policy: {ttl: 300ms, on_expired: %s, backoff: {initial_interval: 100ms, max_interval: 200ms}}`, id, id, onExpired)
	}
	cfg := parseConfig(t, listenerConfig(addr, "", store,
		fmt.Sprintf(`  - {id: sink, type: http, options: {url: %q, timeout: 2s}}`, s.srv.URL),
		route("keep", "dlq")+route("lose", "drop")))
	reg := prometheus.NewRegistry()
	b, err := New(cfg, Options{Logger: testLogger(t), Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	startRun(t, b)
	pub := publisher(t, "tcp://"+addr, "expired-metrics")
	var toks []paho.Token
	const n = 3
	for i := range n {
		toks = append(toks, pub.Publish("line/1", 1, false, msgID(i)))
	}
	waitTokens(t, toks, 20*time.Second)
	waitFor(t, 20*time.Second, "every record expired", func() bool {
		return counter(t, reg, "gobridge_delivery_expired_total", "keep") == n &&
			counter(t, reg, "gobridge_delivery_expired_total", "lose") == n
	})
	got := fmt.Sprintf("keep: dead_lettered %v dropped %v; lose: dead_lettered %v dropped %v",
		counter(t, reg, "gobridge_delivery_dead_lettered_total", "keep"), counter(t, reg, "gobridge_delivery_dropped_total", "keep"),
		counter(t, reg, "gobridge_delivery_dead_lettered_total", "lose"), counter(t, reg, "gobridge_delivery_dropped_total", "lose"))
	if want := fmt.Sprintf("keep: dead_lettered %d dropped 0; lose: dead_lettered 0 dropped %d", n, n); got != want {
		t.Errorf("got %s, want %s", got, want)
	}
}
