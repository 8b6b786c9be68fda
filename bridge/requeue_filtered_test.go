package bridge

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/gobridge/gobridge/stores"
)

// A requeued ingest dead letter that its route's filter rejects at drain
// counts as filtered, as one rejected at ingest does.
func TestMetrics_ARequeuedMessageTheFilterRejectsCountsAsFiltered(t *testing.T) {
	t.Parallel()
	s := newSink(t)
	addr := freeAddr(t)
	store := fmt.Sprintf("{type: sqlite, options: {path: %q}}", filepath.Join(t.TempDir(), "outbox.db"))
	cfg := parseConfig(t, listenerConfig(addr, "", store,
		fmt.Sprintf(`  - {id: sink, type: http, options: {url: %q, timeout: 2s}}`, s.srv.URL), `
  - id: fails
    receiver: edge
    topic: "#"
    sender: sink
    delivery_mode: shared_outbox
    processors: [{type: filter, expr: "payload.k"}]
    session: {id: s1, drain_strategy: {type: fixed_poll, interval: 50ms}}
  - id: rejects
    receiver: edge
    topic: "none/#"
    sender: sink
    delivery_mode: shared_outbox
    processors: [{type: filter, expr: "false"}]
    session: {id: s1, drain_strategy: {type: fixed_poll, interval: 50ms}}`))
	reg := prometheus.NewRegistry()
	b, err := New(cfg, Options{Logger: testLogger(t), Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	startRun(t, b)
	pub := publisher(t, "tcp://"+addr, "requeue-filtered")
	waitTokens(t, []paho.Token{pub.Publish("line/1", 1, false, "not json")}, 20*time.Second)
	waitFor(t, 10*time.Second, "the ingest dead letter", func() bool {
		return counter(t, reg, "gobridge_delivery_dead_lettered_total", "fails") == 1
	})
	dead, _, err := (*Outbox)(b).Dead(t.Context(), stores.DeadQuery{Route: "fails"})
	if err != nil || len(dead) != 1 {
		t.Fatalf("dead letters %v: %v", dead, err)
	}
	if _, err := (*Outbox)(b).Requeue(t.Context(), dead[0].Envelope.ID, "fails", "rejects"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the requeued record settled", func() bool { return sessionStats(t, b, "s1").Live == 0 })
	if got := counter(t, reg, "gobridge_route_filtered_total", "rejects"); got != 1 {
		t.Errorf("gobridge_route_filtered_total{route=rejects} = %v, want 1", got)
	}
}
