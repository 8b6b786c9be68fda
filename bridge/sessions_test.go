package bridge

import (
	"fmt"
	"strings"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/gobridge/gobridge/internal/testservices"
)

// adoptionConfig is one of two bridges sharing a $share subscription with
// persistent sessions, a DynamoDB outbox and its leases.
func adoptionConfig(run, name, mqttURL, ddb, sinkURL string) string {
	return fmt.Sprintf(`version: 1
bridge:
  id: %[1]s-%[2]s
  admin: {listen: ""}
  shutdown_timeout: 5s
  lease_ttl: 6s
stores:
  outbox: {type: dynamodb, options: {table: %[1]s, region: us-east-1, endpoint: %[4]q}}
receivers:
  - id: plant
    type: mqtt
    options: {broker_urls: [%[3]q], client_id: %[1]s-%[2]s, keep_alive: 5s, connect_timeout: 2s}
    topics: [{topic: "$share/%[1]s/%[1]s/+", qos: 1}]
senders:
  - {id: sink, type: http, options: {url: %[5]q}}
routes:
  - id: all
    receiver: plant
    topic: "%[1]s/+"
    processors: [{type: idempotency_key, from: "{payload.id}"}]
    sender: sink
    delivery_mode: shared_outbox
    session: {id: s, partitions: 2, drain_interval: 100ms}
`, run, name, mqttURL, ddb, sinkURL)
}

func publishRange(t *testing.T, c paho.Client, run string, from, to int) {
	t.Helper()
	var toks []paho.Token
	for i := from; i < to; i++ {
		toks = append(toks, c.Publish(fmt.Sprintf("%s/%d", run, i%4), 1, false, fmt.Sprintf(`{"id":%q}`, msgID(i))))
	}
	waitTokens(t, toks, 30*time.Second)
}

func adopted(b *Bridge) int {
	for _, nr := range b.cur.Load().receivers {
		if g, ok := nr.r.(*guarded); ok {
			return g.Adopted()
		}
	}
	return -1
}

// A stopped instance's persistent session goes on collecting its share of
// a $share group at the broker: the other instance adopts it and delivers
// those messages; when the owner comes back, it gets its session back and
// nothing is lost across the handover (DESIGN.md §11.7). The e2e tests
// kill processes; this one runs both bridges in the test, under -race.
func TestBridge_AdoptsAStoppedInstancesSessionAndHandsItBack(t *testing.T) {
	t.Parallel()
	mqttURL := testservices.MQTTURL(t)
	ddb := testservices.DynamoDBEndpoint(t)
	run := fmt.Sprintf("rt-adopt-%d", time.Now().UnixNano())
	s := newSink(t)
	cfg1 := adoptionConfig(run, "b1", mqttURL, ddb, s.srv.URL)
	b1, stop1 := runStoppable(t, parseConfig(t, cfg1))
	waitFor(t, 60*time.Second, "b1 ready", func() bool { return b1.Ready(t.Context()).Ready })
	b2 := startBridge(t, parseConfig(t, adoptionConfig(run, "b2", mqttURL, ddb, s.srv.URL)))
	waitFor(t, 60*time.Second, "b2 ready", func() bool { return b2.Ready(t.Context()).Ready })
	pub := publisher(t, mqttURL, run+"-pub")

	stop1() // its session lease lapses at once; Mosquitto keeps queueing its share
	const n = 200
	publishRange(t, pub, run, 0, n)
	waitFor(t, 60*time.Second, "b2 adopting b1's session and delivering everything", func() bool {
		return adopted(b2) == 1 && s.distinct() == n
	})

	b1 = startBridge(t, parseConfig(t, cfg1))
	publishRange(t, pub, run, n, 2*n) // while the session changes hands
	waitFor(t, 60*time.Second, "b1 back on its own session", func() bool {
		return adopted(b2) == 0 && b1.Ready(t.Context()).Ready
	})
	publishRange(t, pub, run, 2*n, 3*n)
	waitFor(t, 60*time.Second, "every message delivered", func() bool { return s.distinct() == 3*n })
	if st := b1.cur.Load().receivers[0].r.(*guarded).Stats(); st.Received == 0 {
		t.Errorf("b1 received nothing on its own session after it came back: %+v", st)
	}
	t.Logf("%d messages, %d deliveries", 3*n, s.total.Load())
}

// A reload that changes a receiver whose persistent session is leased
// stops the old guarded receiver (its session disconnects and its lease
// lapses) and starts a guarded successor that takes the same session back
// as its own, not as an adopted one; what the broker queued for the
// session meanwhile is delivered, and nothing is lost across the reload.
func TestBridge_ReloadRebuildsAChangedLeasedReceiver(t *testing.T) {
	t.Parallel()
	mqttURL := testservices.MQTTURL(t)
	ddb := testservices.DynamoDBEndpoint(t)
	run := fmt.Sprintf("rt-reload-leased-%d", time.Now().UnixNano())
	s := newSink(t)
	cfg := adoptionConfig(run, "b1", mqttURL, ddb, s.srv.URL)
	b := startBridge(t, parseConfig(t, cfg))
	waitFor(t, 60*time.Second, "ready", func() bool { return b.Ready(t.Context()).Ready })
	pub := publisher(t, mqttURL, run+"-pub")
	const n = 100
	publishRange(t, pub, run, 0, n)
	waitFor(t, 30*time.Second, "the first messages", func() bool { return s.distinct() == n })

	old := b.cur.Load().receivers[0].r
	reloaded := make(chan error, 1)
	go func() {
		reloaded <- b.Reload(t.Context(), parseConfig(t, strings.Replace(cfg, "keep_alive: 5s", "keep_alive: 7s", 1)))
	}()
	publishRange(t, pub, run, n, 2*n) // into the reload: the broker queues what the session does not take
	if err := <-reloaded; err != nil {
		t.Fatalf("Reload: %v", err)
	}
	g, ok := b.cur.Load().receivers[0].r.(*guarded)
	if !ok || g == old {
		t.Fatalf("the changed receiver is %T (the old one: %v), want a new *guarded", b.cur.Load().receivers[0].r, g == old)
	}
	publishRange(t, pub, run, 2*n, 3*n)
	waitFor(t, 60*time.Second, "every message delivered", func() bool { return s.distinct() == 3*n })
	waitFor(t, 30*time.Second, "the successor on its own session", func() bool {
		return g.Status().Connected && b.Ready(t.Context()).Ready
	})
	if a := g.Adopted(); a != 0 {
		t.Errorf("the successor runs %d sessions as adopted ones; want its own session only", a)
	}
}
