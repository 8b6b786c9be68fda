package bridge

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
)

// TestIngest_OversizedPayloadIsAnIngestDeadLetter: a payload over the
// receiver's max_payload_bytes is never routed; it becomes a dead letter of
// its first 1 KiB with reason payload_too_large (its size and hash in the
// reason), is acknowledged, and is counted as rejected.
func TestIngest_OversizedPayloadIsAnIngestDeadLetter(t *testing.T) {
	t.Parallel()
	target := newSink(t)
	addr := freeAddr(t)
	cfg := parseConfig(t, fmt.Sprintf(`version: 1
bridge: {id: test, admin: {listen: ""}}
stores: {outbox: {type: memory}}
receivers:
  - id: edge
    type: mqtt_listener
    options: {listen: %q, allow_anonymous: true, max_payload_bytes: 4096}
    topics: [{topic: "#", qos: 1}]
senders:
  - {id: sink, type: http, options: {url: %q}}
routes:
  - {id: direct, receiver: edge, topic: "#", sender: sink, policy: {on_permanent_failure: dlq}}
`, addr, target.srv.URL))
	rt := startBridge(t, cfg)
	pub := publisher(t, "tcp://"+addr, "oversized")
	waitTokens(t, []paho.Token{
		pub.Publish("line/1", 1, false, strings.Repeat("x", 5000)),
		pub.Publish("line/1", 1, false, "fits"),
	}, 10*time.Second)

	d := onlyDeadLetter(t, rt.store, "direct")
	if !strings.HasPrefix(d.DeadReason, "payload_too_large: 5000 bytes, sha256 ") || len(d.Envelope.Payload) != 1024 {
		t.Fatalf("dead letter %q with %d payload bytes", d.DeadReason, len(d.Envelope.Payload))
	}
	waitFor(t, 10*time.Second, "the message that fits at the target", func() bool { return target.count("fits") == 1 })
	if n := target.distinct(); n != 1 {
		t.Fatalf("the target got %d distinct messages, want only the one that fits", n)
	}
	if !d.Truncated {
		t.Error("the dead letter is not marked truncated")
	}
	if _, err := (*Outbox)(rt).Requeue(t.Context(), d.Envelope.ID, "", ""); err == nil || !strings.Contains(err.Error(), "truncated") {
		t.Errorf("requeue of a truncated dead letter = %v, want a refusal that says why", err)
	}
	rec := httptest.NewRecorder()
	rt.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	for _, want := range []string{
		`gobridge_ingest_rejected_total{reason="payload_too_large",receiver="edge"} 1`,
		// It matched the route and settled there, as a dead letter.
		`gobridge_route_received_total{route="direct"} 2`,
		`gobridge_route_acked_total{route="direct"} 2`,
	} {
		if !strings.Contains(rec.Body.String(), want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}
