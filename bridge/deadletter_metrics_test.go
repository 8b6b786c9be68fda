package bridge

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
	"github.com/prometheus/client_golang/prometheus"
)

// A message the target refuses for good on a direct_or_outbox route is a
// dead letter, not a record persisted for delivery: the route's
// persisted, dead-lettered and direct counts add up to what it settled.
func TestMetrics_IngestDeadLettersAreNotCountedAsPersisted(t *testing.T) {
	t.Parallel()
	s := &sink{got: map[string]int{}}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if strings.Contains(string(b), "bad") {
			http.Error(w, "refused", http.StatusBadRequest) // permanent
			return
		}
		s.total.Add(1)
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(s.srv.Close)
	_, addr, reg := fallbackBridge(t, s, "20s", "on_permanent_failure: dlq, ")
	pub := publisher(t, "tcp://"+addr, "persisted-metric")
	var toks []paho.Token
	const n, bad = 12, 4
	for i := range n {
		id := msgID(i)
		if i < bad {
			id = "bad-" + id
		}
		toks = append(toks, pub.Publish(fmt.Sprintf("line/%d", i), 1, false, fmt.Sprintf(`{"id": %q}`, id)))
	}
	waitTokens(t, toks, 20*time.Second)
	waitFor(t, 10*time.Second, "every message settled", func() bool {
		return counter(t, reg, "gobridge_route_acked_total", "hybrid") == n
	})
	got := fmt.Sprintf("direct %v dead_lettered %v persisted %v fallback %v",
		counter(t, reg, "gobridge_delivery_direct_total", "hybrid"),
		counter(t, reg, "gobridge_delivery_dead_lettered_total", "hybrid"),
		counter(t, reg, "gobridge_route_persisted_total", "hybrid"),
		counter(t, reg, "gobridge_delivery_fallback_total", "hybrid"))
	if want := fmt.Sprintf("direct %d dead_lettered %d persisted 0 fallback 0", n-bad, bad); got != want {
		t.Errorf("got %s, want %s", got, want)
	}
}

// A dead letter made at ingest that the store refuses (over DynamoDB's item
// limit) and keeps truncated is one dead letter, counted once.
func TestMetrics_ARefusedIngestDeadLetterIsCountedOnce(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "refused", http.StatusBadRequest) // permanent
	}))
	t.Cleanup(srv.Close)
	addr := freeAddr(t)
	yml := listenerConfig(addr, "", dynamoStore(t),
		fmt.Sprintf(`  - {id: sink, type: http, options: {url: %q, timeout: 10s}}`, srv.URL), `
  - id: hybrid
    receiver: edge
    topic: "#"
    sender: sink
    delivery_mode: direct_or_outbox
    session: {id: s1}
    policy: {on_permanent_failure: dlq, direct_timeout: 20s}`)
	yml = strings.Replace(yml, fmt.Sprintf("listen: %q}", addr), fmt.Sprintf("listen: %q, max_payload_bytes: 1048576}", addr), 1)
	reg := prometheus.NewRegistry()
	b, err := New(parseConfig(t, yml), Options{Logger: testLogger(t), Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	startRun(t, b)
	pub := publisher(t, "tcp://"+addr, "refused-dead-letter")
	waitTokens(t, []paho.Token{pub.Publish("line/1", 1, false, strings.Repeat("x", 500_000))}, 60*time.Second)
	waitFor(t, 10*time.Second, "the message settled", func() bool {
		return counter(t, reg, "gobridge_route_acked_total", "hybrid") == 1
	})
	got := fmt.Sprintf("dead_lettered %v persisted %v",
		counter(t, reg, "gobridge_delivery_dead_lettered_total", "hybrid"),
		counter(t, reg, "gobridge_route_persisted_total", "hybrid"))
	if want := "dead_lettered 1 persisted 0"; got != want {
		t.Errorf("got %s, want %s", got, want)
	}
}
