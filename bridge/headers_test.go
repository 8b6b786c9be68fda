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

	"github.com/gobridge/gobridge/stores"
)

// A header built from message data is the message's problem, not the
// target's: a route sets a header from the payload (set_headers) and the
// HTTP sender sends it ({header.reading}) to a real net/http server that
// accepts about 4 KiB of headers. Readings of 200 KiB (over the sender's
// 8 KiB bound: never sent) and of 6 KiB (sent; the target answers 431) are
// dead-lettered with their reasons, the next normal reading is delivered,
// and the sender is never marked down. The poison rule cannot dead-letter
// them here (max_replay_attempts 1000, replay_budget 1h): only a permanent
// classification does.
func TestHeaders_AnOversizedHeaderFromTheMessageIsDeadLetteredNotATargetOutage(t *testing.T) {
	t.Parallel()
	var delivered atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		delivered.Add(1)
		w.WriteHeader(http.StatusNoContent)
	}))
	srv.Config.MaxHeaderBytes = 1 // net/http allows 4 KiB more
	srv.Start()
	t.Cleanup(srv.Close)

	addr := freeAddr(t)
	store := fmt.Sprintf("{type: sqlite, options: {path: %q}}", filepath.Join(t.TempDir(), "outbox.db"))
	cfg := parseConfig(t, listenerConfig(addr, "", store,
		fmt.Sprintf(`  - {id: sink, type: http, options: {url: %q, headers: {X-Reading: "{header.reading}"}}}`, srv.URL), `
  - id: r
    receiver: edge
    topic: "#"
    sender: sink
    delivery_mode: shared_outbox
    processors:
      - {type: set_headers, headers: {reading: "{payload.r}"}}
    session: {id: s1, drain_strategy: {type: fixed_poll, interval: 50ms}}
    policy: {on_permanent_failure: dlq, max_replay_attempts: 1000, replay_budget: 1h, backoff: {initial_interval: 50ms, max_interval: 200ms}}`))
	b, err := New(cfg, Options{Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	startRun(t, b)

	reading := func(n int) string { return `{"r":"` + strings.Repeat("a", n) + `"}` }
	pub := publisher(t, "tcp://"+addr, "headers-431")
	var toks []paho.Token
	for _, n := range []int{200 << 10, 6 << 10, 200<<10 + 1, 6<<10 + 1} { // distinct records, more than senders.DownAfter
		toks = append(toks, pub.Publish("line/1", 1, false, reading(n)))
	}
	waitTokens(t, toks, 20*time.Second)
	waitFor(t, time.Minute, "4 dead letters", func() bool {
		dead, _, err := b.store.Dead(t.Context(), stores.DeadQuery{})
		return err == nil && len(dead) == 4
	})
	waitTokens(t, []paho.Token{pub.Publish("line/1", 1, false, reading(4))}, 20*time.Second)
	waitFor(t, time.Minute, "the normal reading delivered and settled", func() bool {
		return delivered.Load() == 1 && sessionStats(t, b, "s1").Live == 0
	})

	dead, _, err := b.store.Dead(t.Context(), stores.DeadQuery{})
	if err != nil {
		t.Fatal(err)
	}
	var tooBig, tooLarge int
	for _, d := range dead {
		switch {
		case strings.Contains(d.DeadReason, "header X-Reading: the value is 2048"):
			tooBig++
		case strings.Contains(d.DeadReason, "status 431"):
			tooLarge++
		default:
			t.Errorf("dead letter of %d bytes: reason %q", len(d.Envelope.Payload), d.DeadReason)
		}
	}
	if tooBig != 2 || tooLarge != 2 {
		t.Errorf("%d dead letters over the bound and %d refused with 431, want 2 and 2", tooBig, tooLarge)
	}
	if s := b.journal.Senders(); len(s) != 0 {
		t.Errorf("the sender changed state: %+v, want it up throughout", s)
	}
}
