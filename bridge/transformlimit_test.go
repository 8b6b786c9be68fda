package bridge

import (
	"fmt"
	"strings"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
)

// A transform cannot make a payload larger than its receiver would have
// taken (max_payload_bytes, 256 KiB here): 100 KiB of control bytes become
// 600 KiB of JSON escapes. The message is dead at ingest as it arrived.
func TestBridge_TransformOutputOverMaxPayloadBytesIsADeadLetter(t *testing.T) {
	t.Parallel()
	snk := newSink(t)
	addr := freeAddr(t)
	rt := startBridge(t, parseConfig(t, listenerConfig(addr, "", "{type: memory}",
		fmt.Sprintf(`  - {id: sink, type: http, options: {url: %q}}`, snk.srv.URL), `
  - id: wrap
    receiver: edge
    topic: "#"
    sender: sink
    delivery_mode: shared_outbox
    session: {id: s1}
    processors: [{type: transform, expr: "{'a': raw}"}]
    policy: {on_permanent_failure: dlq}`)))
	pub := publisher(t, "tcp://"+addr, "transform-limit")
	payload := strings.Repeat("\x01", 100<<10)
	waitTokens(t, []paho.Token{pub.Publish("line/1", 1, false, payload)}, 10*time.Second)
	d := onlyDeadLetter(t, rt.store, "wrap")
	if string(d.Envelope.Payload) != payload || !strings.Contains(d.DeadReason, "max_payload_bytes") {
		t.Fatalf("dead letter of %d bytes (%.300q), want the message as it arrived and a max_payload_bytes reason",
			len(d.Envelope.Payload), d.DeadReason)
	}
}
