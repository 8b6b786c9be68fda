package bridge

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
	mochi "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/hooks/auth"
	"github.com/mochi-mqtt/server/v2/listeners"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/gobridge/gobridge/stores"
)

// ackRecorder is a broker hook that records, for one client, the packet IDs
// of the PUBLISHes the broker sent it and of the PUBACKs it sent back, in
// the order they crossed the wire.
type ackRecorder struct {
	mochi.HookBase
	client string
	mu     sync.Mutex
	sent   []uint16
	acks   []uint16
}

func (h *ackRecorder) ID() string { return "ack-recorder" }

func (h *ackRecorder) Provides(b byte) bool {
	return b == mochi.OnPacketSent || b == mochi.OnPacketRead
}

func (h *ackRecorder) OnPacketSent(cl *mochi.Client, pk packets.Packet, _ []byte) {
	if cl.ID == h.client && pk.FixedHeader.Type == packets.Publish && pk.FixedHeader.Qos > 0 && !pk.FixedHeader.Dup {
		h.mu.Lock()
		h.sent = append(h.sent, pk.PacketID)
		h.mu.Unlock()
	}
}

func (h *ackRecorder) OnPacketRead(cl *mochi.Client, pk packets.Packet) (packets.Packet, error) {
	if cl.ID == h.client && pk.FixedHeader.Type == packets.Puback {
		h.mu.Lock()
		h.acks = append(h.acks, pk.PacketID)
		h.mu.Unlock()
	}
	return pk, nil
}

func (h *ackRecorder) snapshot() (sent, acks []uint16) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]uint16(nil), h.sent...), append([]uint16(nil), h.acks...)
}

// startBroker runs an in-process mochi broker on addr with extra hooks; the
// returned stop closes it.
func startBroker(t testing.TB, addr string, hooks ...mochi.Hook) (stop func()) {
	t.Helper()
	caps := mochi.NewDefaultServerCapabilities()
	caps.MaximumInflight = 65535
	caps.MaximumClientWritesPending = 65535
	srv := mochi.New(&mochi.Options{Capabilities: caps, InlineClient: true, Logger: testLogger(t)})
	if err := srv.AddHook(new(auth.AllowHook), nil); err != nil {
		t.Fatal(err)
	}
	for _, h := range hooks {
		if err := srv.AddHook(h, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := srv.AddListener(listeners.NewTCP(listeners.Config{ID: "tcp", Address: addr})); err != nil {
		t.Fatal(err)
	}
	if err := srv.Serve(); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	stop = func() { once.Do(func() { _ = srv.Close() }) }
	t.Cleanup(stop)
	return stop
}

func mqttClientConfig(brokerAddr, clientID, admin, senderURL, routeExtra string) string {
	return fmt.Sprintf(`version: 1
bridge:
  id: test
  admin: {listen: %q}
  shutdown_timeout: 10s
receivers:
  - id: plant
    type: mqtt
    options:
      broker_urls: [tcp://%s]
      client_id: %s
      clean_session: true
      keep_alive: 5s
      connect_timeout: 2s
    topics: [{topic: "t/#", qos: 1}]
senders:
  - {id: sink, type: http, options: {url: %q, timeout: 5s}}
routes:
  - id: direct
    receiver: plant
    topic: "t/#"
    sender: sink
%s
`, admin, brokerAddr, clientID, senderURL, routeExtra)
}

func TestDirectHold_AcksInArrivalOrderWhenSendsFinishOutOfOrder(t *testing.T) {
	t.Parallel()
	addr := freeAddr(t)
	rec := &ackRecorder{client: "gobridge-acks"}
	startBroker(t, addr, rec)

	s := newSink(t)
	release := make(chan struct{})
	s.hook = func(body string) {
		if body == msgID(0) {
			<-release // the first message finishes last
		}
	}
	cfg := parseConfig(t, mqttClientConfig(addr, "gobridge-acks", "", s.srv.URL, "    policy: {max_in_flight: 20}"))
	rt := startBridge(t, cfg)
	waitFor(t, 10*time.Second, "receiver subscribed", func() bool { return rt.Ready(t.Context()).Ready })

	pub := publisher(t, "tcp://"+addr, "pub-acks")
	const n = 10
	var toks []paho.Token
	for i := range n {
		toks = append(toks, pub.Publish("t/x", 1, false, msgID(i)))
	}
	waitTokens(t, toks, 10*time.Second)
	waitFor(t, 10*time.Second, "messages 1..9 delivered while 0 is held", func() bool { return s.distinct() == n-1 })
	// Messages 1..9 were delivered, 0 is not: nothing may be acknowledged
	// yet, since 0 arrived first. Give stray PUBACKs a moment to show up.
	deadline := time.Now().Add(300 * time.Millisecond)
	for time.Now().Before(deadline) {
		if _, acks := rec.snapshot(); len(acks) > 0 {
			close(release)
			t.Fatalf("bridge acknowledged %d messages before the first one was delivered", len(acks))
		}
		time.Sleep(10 * time.Millisecond) // polling interval
	}
	close(release)
	waitFor(t, 10*time.Second, "every PUBACK", func() bool { _, acks := rec.snapshot(); return len(acks) == n })
	sent, acks := rec.snapshot()
	if len(sent) != n {
		t.Fatalf("broker sent %d publishes, want %d", len(sent), n)
	}
	for i := range sent {
		if sent[i] != acks[i] {
			t.Fatalf("PUBACK order %v differs from arrival order %v", acks, sent)
		}
	}
}

func TestDirectHold_SinkDownHoldsTheSourceUntilDelivered(t *testing.T) {
	t.Parallel()
	s := newSink(t)
	s.down.Store(true)
	toks := map[string]paho.Token{}
	var mu sync.Mutex
	var early []string
	s.hook = func(body string) {
		mu.Lock()
		defer mu.Unlock()
		if tok := toks[body]; tok != nil && tokenDone(tok) {
			early = append(early, body)
		}
	}
	addr := freeAddr(t)
	cfg := parseConfig(t, listenerConfig(addr, "", "{type: memory}",
		fmt.Sprintf(`  - {id: sink, type: http, options: {url: %q}}`, s.srv.URL), `
  - id: direct
    receiver: edge
    topic: "#"
    sender: sink
    policy:
      max_in_flight: 4
      backoff: {initial_interval: 100ms, max_interval: 500ms}`))
	startBridge(t, cfg)

	// Several publishers, so several messages are held at once (the
	// listener holds each publisher's next message behind its current one).
	const pubs, per = 5, 4
	var all []paho.Token
	for p := range pubs {
		c := publisher(t, "tcp://"+addr, fmt.Sprintf("pub-%d", p))
		for i := range per {
			id := msgID(p*per + i)
			tok := c.Publish("line/x", 1, false, id)
			mu.Lock()
			toks[id] = tok
			mu.Unlock()
			all = append(all, tok)
		}
	}
	downFor := time.After(5 * time.Second)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
wait:
	for {
		select {
		case <-downFor:
			break wait
		case <-tick.C:
			for i, tok := range all {
				if tokenDone(tok) {
					t.Fatalf("message %d acknowledged while the sink is down", i)
				}
			}
		}
	}
	s.down.Store(false)
	waitTokens(t, all, 20*time.Second)
	waitFor(t, 5*time.Second, "every message delivered", func() bool { return s.distinct() == pubs*per })
	mu.Lock()
	defer mu.Unlock()
	if len(early) > 0 {
		t.Fatalf("acknowledged before delivery: %v", early)
	}
}

func TestDirectHold_PermanentFailuresAreDeadLettered(t *testing.T) {
	t.Parallel()
	// The sink rejects "bad" with 400 (permanent); a processor fails on
	// non-JSON payloads (no msg_id field).
	// The handler is set before the server starts (replacing a running
	// server's Handler would race with its connection goroutines).
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if strings.Contains(string(b), "bad") {
			http.Error(w, "no", http.StatusBadRequest)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	srvURL := srv.URL
	addr := freeAddr(t)
	cfg := parseConfig(t, listenerConfig(addr, "", "{type: memory}",
		fmt.Sprintf(`  - {id: sink, type: http, options: {url: %q}}`, srvURL), `
  - id: direct
    receiver: edge
    topic: "#"
    sender: sink
    processors: [{type: idempotency_key, from: "{payload.msg_id}"}]
    policy: {on_permanent_failure: dlq}`))
	rt := startBridge(t, cfg)
	pub := publisher(t, "tcp://"+addr, "perm")
	toks := []paho.Token{
		pub.Publish("line/x", 1, false, `{"msg_id": "good-1"}`),
		pub.Publish("line/x", 1, false, `{"msg_id": "bad-1"}`),
		pub.Publish("line/x", 1, false, `not json`),
	}
	waitTokens(t, toks, 10*time.Second)
	dead, _, err := rt.store.Dead(t.Context(), stores.DeadQuery{Route: "direct"})
	if err != nil {
		t.Fatal(err)
	}
	if len(dead) != 2 {
		t.Fatalf("%d dead letters, want 2: %+v", len(dead), dead)
	}
	byPayload := map[string]stores.Record{}
	for _, d := range dead {
		byPayload[string(d.Envelope.Payload)] = d
	}
	if d := byPayload[`{"msg_id": "bad-1"}`]; d.Envelope.ID != "bad-1" || d.DeadReason == "" {
		t.Errorf("rejected message: dead letter %q (%q), want ID bad-1 with a reason", d.Envelope.ID, d.DeadReason)
	}
	if d := byPayload["not json"]; !strings.Contains(d.DeadReason, "processor") {
		t.Errorf("non-JSON message: dead letter reason %q, want a processor reason", d.DeadReason)
	}

	// Requeued while the target still rejects it: the replay fails the same
	// way and the same record is dead again, with the new reason.
	requeued, err := (*Outbox)(rt).Requeue(t.Context(), "bad-1", "", "")
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the replay to be dead-lettered again", func() bool {
		d, err := getDead(rt, t.Context(), requeued.Envelope.ID)
		return err == nil && strings.Contains(d.DeadReason, "400")
	})
	dead, _, err = rt.store.Dead(t.Context(), stores.DeadQuery{Route: "direct"})
	if err != nil {
		t.Fatal(err)
	}
	if len(dead) != 2 {
		t.Fatalf("%d dead letters after a failed replay, want 2: %+v", len(dead), dead)
	}
}

// TestDirectHold_RunWaitsForItsSendGoroutines checks that no goroutine of a
// direct route outlives Run (Run waits for them; before it did, they
// returned soon after, unowned). Not parallel: it counts goroutines by name.
func TestDirectHold_RunWaitsForItsSendGoroutines(t *testing.T) {
	addr := freeAddr(t)
	startBroker(t, addr)
	s := newSink(t)
	cfg := parseConfig(t, mqttClientConfig(addr, "gobridge-workers", "", s.srv.URL, "    policy: {max_in_flight: 20}"))
	rt, stop := runStoppable(t, cfg)
	waitFor(t, 10*time.Second, "receiver subscribed", func() bool { return rt.Ready(t.Context()).Ready })
	pub := publisher(t, "tcp://"+addr, "pub-workers")
	var toks []paho.Token
	for i := range 50 {
		toks = append(toks, pub.Publish("t/x", 1, false, msgID(i)))
	}
	waitTokens(t, toks, 10*time.Second)
	waitFor(t, 10*time.Second, "every message delivered", func() bool { return s.distinct() == 50 })
	workers := func() int {
		buf := make([]byte, 1<<20)
		return strings.Count(string(buf[:runtime.Stack(buf, true)]), "bridge.(*lanes).work(")
	}
	if workers() == 0 {
		t.Fatal("no send goroutine seen while the route runs: the count cannot tell anything")
	}
	stop()
	if n := workers(); n != 0 {
		t.Fatalf("%d send goroutines still run after Run returned", n)
	}
}
