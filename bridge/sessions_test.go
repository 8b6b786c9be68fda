package bridge

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/gobridge/gobridge/internal/testservices"
	"github.com/gobridge/gobridge/stores"
)

// adoptionConfig is one of two bridges sharing a $share subscription with
// persistent sessions, a DynamoDB outbox and its leases. The lease TTL is
// 12 s (renewed every 4 s): a DynamoDB Local that other tests load may
// stall a renewal past 2 s, which would cost a 6 s lease. (The tests stop
// instances gracefully, which ends their leases at once.)
func adoptionConfig(run, name, mqttURL, ddb, sinkURL string) string {
	return fmt.Sprintf(`version: 1
bridge:
  id: %[1]s-%[2]s
  admin: {listen: ""}
  shutdown_timeout: 5s
  lease_ttl: 12s
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
	testservices.DropTablesAtCleanup(t, ddb, run)
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
	testservices.DropTablesAtCleanup(t, ddb, run)
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

// lapseGate is an instance's own store, except that once armed, the lapse
// of the session lease named lease (the Renew to 1 ns of a receiver that
// stops) returns only when adoptedBy reports that the other instance took
// the session. A reload opens a moment in which another instance may adopt
// the session; the gate makes the other instance win that race every run.
type lapseGate struct {
	stores.Store
	lease     string
	adoptedBy func() bool
	armed     atomic.Bool
	adopted   atomic.Bool // the other instance held the session when the gate opened
}

func (g *lapseGate) Renew(ctx context.Context, l stores.Lease, ttl time.Duration, now time.Time) (stores.Lease, error) {
	nl, err := g.Store.Renew(ctx, l, ttl, now)
	if err == nil && l.Name == g.lease && ttl == time.Nanosecond && g.armed.CompareAndSwap(true, false) {
		deadline := time.Now().Add(60 * time.Second)
		for !g.adoptedBy() && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond) // polling interval, not synchronisation
		}
		g.adopted.Store(g.adoptedBy())
	}
	return nl, err
}

// A reload that rebuilds A's leased receiver lets A's session lease lapse;
// B, sharing the outbox and the $share group, adopts the session in that
// moment (the gate makes sure it does). A's new receiver asks for it back
// (want/), B hands it back, and A runs it as its own again. A publisher
// keeps publishing QoS 1 messages throughout: every one it had
// acknowledged reaches the target (duplicates allowed and counted), and
// the outbox ends empty.
func TestBridge_ReloadTakesBackTheSessionAnotherInstanceAdopted(t *testing.T) {
	t.Parallel()
	mqttURL := testservices.MQTTURL(t)
	ddb := testservices.DynamoDBEndpoint(t)
	run := fmt.Sprintf("rt-reload-adopt-%d", time.Now().UnixNano())
	testservices.DropTablesAtCleanup(t, ddb, run)
	s := newSink(t)

	config := func(name string) string { return adoptionConfig(run, name, mqttURL, ddb, s.srv.URL) }
	cfgA := config("a")
	a, err := New(parseConfig(t, cfgA), Options{Logger: testLogger(t), Stdout: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	ga := a.cur.Load().receivers[0].r.(*guarded)
	gate := &lapseGate{Store: a.store, lease: ga.prefix + ga.own}
	a.store = gate
	startRun(t, a)
	waitFor(t, 60*time.Second, "A ready", func() bool { return a.Ready(t.Context()).Ready })
	b := startBridge(t, parseConfig(t, config("b")))
	waitFor(t, 60*time.Second, "B ready", func() bool { return b.Ready(t.Context()).Ready })
	gate.adoptedBy = func() bool { return adopted(b) == 1 }

	pub := startSteadyWith(t, strings.TrimPrefix(mqttURL, "tcp://"), run+"-pub", run+"/0", 20*time.Millisecond,
		func(i int) string { return fmt.Sprintf(`{"id":%q}`, msgID(i)) })
	waitFor(t, 60*time.Second, "the first deliveries", func() bool { return s.distinct() >= 50 })

	gate.armed.Store(true)
	if err := a.Reload(t.Context(), parseConfig(t, strings.Replace(cfgA, "keep_alive: 5s", "keep_alive: 7s", 1))); err != nil {
		t.Fatalf("Reload: %v", err)
	}
	if !gate.adopted.Load() {
		t.Fatalf("B did not adopt A's session during the reload (or the reload did not let A's lease lapse at once)")
	}
	ga2, ok := a.cur.Load().receivers[0].r.(*guarded)
	if !ok || ga2 == ga {
		t.Fatalf("A's changed receiver is %T (the old one: %v), want a new *guarded", a.cur.Load().receivers[0].r, ga2 == ga)
	}
	waitFor(t, 60*time.Second, "A back on its own session and B without it", func() bool {
		return ga2.Status().Connected && adopted(b) == 0
	})
	leases, err := a.store.List(t.Context(), gate.lease, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if len(leases) != 1 || leases[0].Owner != a.owner {
		t.Errorf("A's session lease %s: %+v, want one held by A (%s), not B (%s)", gate.lease, leases, a.owner, b.owner)
	}
	if wants, err := a.store.List(t.Context(), wantPrefix+gate.lease, time.Now()); err != nil || len(wants) != 0 {
		t.Errorf("A still asks for its session back once it holds it: %+v, %v", wants, err)
	}
	if n := ga2.Adopted(); n != 0 {
		t.Errorf("A's new receiver runs %d adopted sessions; want its own session only", n)
	}
	got := ga2.Stats().Received
	sent := pub.sent()
	waitFor(t, 60*time.Second, "A receiving on its own session after the handover", func() bool {
		return ga2.Stats().Received > got+20 && pub.sent() > sent+50
	})

	acked := pub.acked(t)
	if n := pub.sent(); len(acked) != n || pub.lost.Load() != 0 {
		t.Fatalf("the broker acknowledged %d of %d messages (connections lost: %d)", len(acked), n, pub.lost.Load())
	}
	var missing []string
	defer func() {
		if len(missing) > 0 {
			t.Logf("%d of %d acknowledged messages not delivered, among them %v", len(missing), len(acked), missing[:min(len(missing), 5)])
		}
	}()
	waitFor(t, 120*time.Second, "every acknowledged message delivered", func() bool {
		missing = missing[:0]
		for _, m := range acked {
			if s.count(m) == 0 {
				missing = append(missing, m)
			}
		}
		return len(missing) == 0
	})
	waitFor(t, 60*time.Second, "nothing pending in the outbox", func() bool { return sessionStats(t, a, "s").Live == 0 })
	if st := sessionStats(t, a, "s"); st.Routes["all"].Dead != 0 {
		t.Errorf("dead letters in the outbox: %+v", st)
	}
	if d := s.distinct(); d != len(acked) {
		t.Errorf("the target got %d distinct messages; %d were published", d, len(acked))
	}
	dups := 0
	for _, m := range acked {
		if c := s.count(m); c > 1 {
			dups += c - 1
		}
	}
	t.Logf("%d messages published and acknowledged, %d deliveries, %d duplicates (at least once)", len(acked), s.total.Load(), dups)
}
