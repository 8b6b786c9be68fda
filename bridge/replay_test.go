package bridge

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/gobridge/gobridge/routes"
	"github.com/gobridge/gobridge/stores"
)

// onlyDeadLetter returns the one dead letter of route.
func onlyDeadLetter(t *testing.T, s stores.Store, route string) stores.Record {
	t.Helper()
	dead, _, err := s.Dead(t.Context(), stores.DeadQuery{Route: route})
	if err != nil {
		t.Fatal(err)
	}
	if len(dead) != 1 {
		t.Fatalf("%d dead letters on route %s, want 1: %+v", len(dead), route, dead)
	}
	return dead[0]
}

func TestReplay_RequeuedDirectHoldDeadLetterIsDeliveredOnceTheTargetAccepts(t *testing.T) {
	t.Parallel()
	var rejecting atomic.Bool
	rejecting.Store(true)
	var delivered atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if rejecting.Load() {
			http.Error(w, "schema mismatch", http.StatusUnprocessableEntity)
			return
		}
		if string(b) == `{"msg_id": "m-1", "v": 7}` {
			delivered.Add(1)
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	addr := freeAddr(t)
	cfg := parseConfig(t, listenerConfig(addr, "", "{type: memory}",
		fmt.Sprintf(`  - {id: sink, type: http, options: {url: %q}}`, srv.URL), `
  - id: direct
    receiver: edge
    topic: "#"
    sender: sink
    processors: [{type: idempotency_key, from: "{payload.msg_id}"}]
    policy: {on_permanent_failure: dlq}`))
	rt := startBridge(t, cfg)
	pub := publisher(t, "tcp://"+addr, "replay-direct")
	waitTokens(t, []paho.Token{pub.Publish("line/1", 1, false, `{"msg_id": "m-1", "v": 7}`)}, 10*time.Second)

	d := onlyDeadLetter(t, rt.store, "direct")
	if d.Envelope.ID != "m-1" || d.Envelope.Topic != "line/1" || !strings.Contains(d.DeadReason, "422") {
		t.Fatalf("dead letter = %s on %s (%q), want m-1 on line/1 with the 422", d.Envelope.ID, d.Envelope.Topic, d.DeadReason)
	}

	rejecting.Store(false)
	if _, err := (*Outbox)(rt).Requeue(t.Context(), "m-1", "", ""); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the requeued message at the target", func() bool { return delivered.Load() == 1 })
	waitFor(t, 10*time.Second, "the replayed record to be completed", func() bool {
		return sessionStats(t, rt, homePrefix+"direct").Live == 0
	})
	if dead, _, err := rt.store.Dead(t.Context(), stores.DeadQuery{}); err != nil || len(dead) != 0 {
		t.Fatalf("dead letters after a successful replay: %d (%v)", len(dead), err)
	}
	if n := delivered.Load(); n != 1 {
		t.Fatalf("target got the message %d times, want 1", n)
	}
}

// The operator's path for a processor that was wrong: the message is dead
// at ingest as it arrived; the config is fixed and the bridge restarted;
// a requeue runs the message through the fixed route.
func TestReplay_RequeueAfterAConfigFixRunsTheFixedProcessors(t *testing.T) {
	t.Parallel()
	snk := newSink(t)
	store := fmt.Sprintf("{type: sqlite, options: {path: %q}}", filepath.Join(t.TempDir(), "outbox.db"))
	config := func(addr, idFrom string) *routes.Config {
		return parseConfig(t, listenerConfig(addr, "", store,
			fmt.Sprintf(`  - {id: sink, type: http, options: {url: %q}}`, snk.srv.URL), `
  - id: readings
    receiver: edge
    topic: "#"
    sender: sink
    delivery_mode: shared_outbox
    session: {id: plant}
    processors:
      - {type: idempotency_key, from: "`+idFrom+`"}
      - {type: transform, expr: 'payload.value * 10'}
    policy: {on_permanent_failure: dlq}`))
	}

	addr := freeAddr(t)
	rt, stop := runStoppable(t, config(addr, "{payload.serial}")) // wrong field
	pub := publisher(t, "tcp://"+addr, "replay-fix")
	waitTokens(t, []paho.Token{pub.Publish("line/1", 1, false, `{"id": "r-1", "value": 4}`)}, 10*time.Second)
	d := onlyDeadLetter(t, rt.store, "readings")
	if string(d.Envelope.Payload) != `{"id": "r-1", "value": 4}` || !strings.Contains(d.DeadReason, "processor") {
		t.Fatalf("dead letter payload %q (%q), want the message as it arrived with a processor reason",
			d.Envelope.Payload, d.DeadReason)
	}
	pub.Disconnect(0)
	stop()

	addr = freeAddr(t)
	rt, _ = runStoppable(t, config(addr, "{payload.id}")) // fixed
	if _, err := (*Outbox)(rt).Requeue(t.Context(), d.Envelope.ID, "", ""); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the transformed message at the target", func() bool { return snk.count("40") == 1 })
	waitFor(t, 10*time.Second, "the replayed record to be completed", func() bool {
		return sessionStats(t, rt, homePrefix+"readings").Live == 0
	})
	if dead, _, err := rt.store.Dead(t.Context(), stores.DeadQuery{}); err != nil || len(dead) != 0 {
		t.Fatalf("dead letters after a successful replay: %d (%v)", len(dead), err)
	}
}

func TestReplay_AReplayHeldByADownTargetHoldsOnlyItsRoute(t *testing.T) {
	t.Parallel()
	// Each target rejects (400) until its mode changes; then "a" answers
	// 503 (down: the replay is retried while held) and "b" accepts.
	var modeA, modeB atomic.Int32 // 0 reject, 1 down / accept
	var answeredA, answeredB atomic.Int64
	target := func(mode *atomic.Int32, up bool, answered *atomic.Int64) *httptest.Server {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			switch {
			case mode.Load() == 0:
				http.Error(w, "rejected", http.StatusBadRequest)
				return
			case !up:
				http.Error(w, "down", http.StatusServiceUnavailable)
			default:
				w.WriteHeader(http.StatusNoContent)
			}
			answered.Add(1)
		}))
		t.Cleanup(srv.Close)
		return srv
	}
	a, b := target(&modeA, false, &answeredA), target(&modeB, true, &answeredB)
	addr := freeAddr(t)
	cfg := parseConfig(t, listenerConfig(addr, "", "{type: memory}", fmt.Sprintf(`
  - {id: a, type: http, options: {url: %q}}
  - {id: b, type: http, options: {url: %q}}`, a.URL, b.URL), `
  - {id: ra, receiver: edge, topic: "a/#", sender: a, policy: {on_permanent_failure: dlq, backoff: {initial_interval: 50ms, max_interval: 100ms}}}
  - {id: rb, receiver: edge, topic: "b/#", sender: b, policy: {on_permanent_failure: dlq}}`))
	rt := startBridge(t, cfg)
	pub := publisher(t, "tcp://"+addr, "replay-isolation")
	waitTokens(t, []paho.Token{pub.Publish("a/1", 1, false, "for a"), pub.Publish("b/1", 1, false, "for b")}, 10*time.Second)
	da, db := onlyDeadLetter(t, rt.store, "ra"), onlyDeadLetter(t, rt.store, "rb")

	modeA.Store(1)
	modeB.Store(1)
	if _, err := (*Outbox)(rt).Requeue(t.Context(), da.Envelope.ID, "", ""); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "route a's replay retried against its down target", func() bool { return answeredA.Load() >= 2 })
	if _, err := (*Outbox)(rt).Requeue(t.Context(), db.Envelope.ID, "", ""); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "route b's replay delivered while a's is held", func() bool { return answeredB.Load() == 1 })
}
