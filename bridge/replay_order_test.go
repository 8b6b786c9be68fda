package bridge

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/gobridge/gobridge/routes"
	"github.com/gobridge/gobridge/stores"
)

// Requeued ingest dead letters of one ordering key are delivered in the
// order they were requeued, like every record of the key: the key comes
// from the route's ordering_key, which only the replay of the processors
// renders (a raw record is stored as it arrived, without it). Before, such
// records had no key in the drainer, so a newer one went out while an older
// one waited for its retry. The first delivery of the oldest fails once
// (500): the two after it must wait for it.
func TestReplay_RequeuedIngestDeadLettersKeepTheirKeyOrder(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var got []string
	failed := false
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		defer mu.Unlock()
		if string(b) == "1" && !failed {
			failed = true
			http.Error(w, "busy", http.StatusInternalServerError)
			return
		}
		got = append(got, string(b))
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	store := fmt.Sprintf("{type: sqlite, options: {path: %q}}", filepath.Join(t.TempDir(), "outbox.db"))
	config := func(addr, idFrom string) *routes.Config {
		return parseConfig(t, listenerConfig(addr, "", store,
			fmt.Sprintf(`  - {id: sink, type: http, options: {url: %q}}`, srv.URL), `
  - id: readings
    receiver: edge
    topic: "#"
    sender: sink
    delivery_mode: shared_outbox
    session: {id: plant}
    ordering_key: "{topic}"
    processors:
      - {type: idempotency_key, from: "`+idFrom+`"}
      - {type: transform, expr: 'payload.v'}
    policy: {on_permanent_failure: dlq, backoff: {initial_interval: 50ms, max_interval: 200ms, multiplier: 2.0}}`))
	}

	addr := freeAddr(t)
	rt, stop := runStoppable(t, config(addr, "{payload.serial}")) // wrong field
	pub := publisher(t, "tcp://"+addr, "replay-order")
	for v := 1; v <= 3; v++ {
		waitTokens(t, []paho.Token{pub.Publish("line/1", 1, false, fmt.Sprintf(`{"id": "r-%d", "v": %d}`, v, v))}, 10*time.Second)
	}
	dead, _, err := rt.store.Dead(t.Context(), stores.DeadQuery{Route: "readings"})
	if err != nil || len(dead) != 3 {
		t.Fatalf("%d dead letters (%v), want 3", len(dead), err)
	}
	pub.Disconnect(0)
	stop()

	rt, _ = runStoppable(t, config(freeAddr(t), "{payload.id}")) // fixed
	// Requeued oldest first (Dead lists them so).
	for _, d := range dead {
		if _, err := (*Outbox)(rt).Requeue(t.Context(), d.Envelope.ID, "", ""); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 10*time.Second, "the three replayed messages at the target", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) == 3
	})
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(got, []string{"1", "2", "3"}) {
		t.Fatalf("target got %v, want [1 2 3]: the key's order", got)
	}
}
