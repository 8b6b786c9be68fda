package bridge

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/gobridge/gobridge/routes"
)

// reloadConfig is a bridge on an embedded listener at addr with a SQLite
// outbox, bridge.id id, and the given senders and routes (YAML list items).
func reloadConfig(t *testing.T, id, addr, db, senders, routesYAML string) *routes.Config {
	t.Helper()
	return parseConfig(t, fmt.Sprintf(`version: 1
bridge: {id: %s, admin: {listen: ""}, shutdown_timeout: 10s}
stores: {outbox: {type: sqlite, options: {path: %q}}}
receivers:
  - {id: edge, type: mqtt_listener, options: {listen: %q}, topics: [{topic: "#", qos: 1}]}
senders:
%s
routes:
%s
`, id, db, addr, senders, routesYAML))
}

// steadyPublisher publishes "<prefix>-N" (startSteady) on topic at QoS 1 from its own
// connection until stop; acked returns the payloads the listener
// acknowledged.
type steadyPublisher struct {
	c    paho.Client
	lost atomic.Int64 // connections lost
	stop chan struct{}
	done chan struct{}
	mu   sync.Mutex
	toks map[string]paho.Token
}

func startSteady(t *testing.T, addr, id, topic, prefix string) *steadyPublisher {
	t.Helper()
	return startSteadyWith(t, addr, id, topic, 2*time.Millisecond, func(i int) string { return fmt.Sprintf("%s-%05d", prefix, i) })
}

// startSteadyWith publishes payload(0), payload(1), ... one per every.
func startSteadyWith(t *testing.T, addr, id, topic string, every time.Duration, payload func(int) string) *steadyPublisher {
	t.Helper()
	p := &steadyPublisher{stop: make(chan struct{}), done: make(chan struct{}), toks: map[string]paho.Token{}}
	p.c = connectCounting(t, addr, id, &p.lost)
	go func() {
		defer close(p.done)
		tick := time.NewTicker(every) // the publishing rate, not synchronisation
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-p.stop:
				return
			case <-tick.C:
			}
			msg := payload(i)
			tok := p.c.Publish(topic, 1, false, msg)
			p.mu.Lock()
			p.toks[msg] = tok
			p.mu.Unlock()
		}
	}()
	t.Cleanup(p.halt)
	return p
}

func (p *steadyPublisher) halt() {
	select {
	case <-p.stop:
	default:
		close(p.stop)
	}
	<-p.done
}

// sent is how many messages were published so far.
func (p *steadyPublisher) sent() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.toks)
}

// acked halts the publisher, waits for every acknowledgement and returns
// the payloads acknowledged.
func (p *steadyPublisher) acked(t *testing.T) []string {
	t.Helper()
	p.halt()
	var out []string
	for payload, tok := range p.toks {
		if !tok.WaitTimeout(20 * time.Second) {
			t.Fatalf("%s not acknowledged after 20s", payload)
		}
		if tok.Error() == nil {
			out = append(out, payload)
		}
	}
	return out
}

// connectCounting connects a persistent-connection publisher that counts
// lost connections in lost.
func connectCounting(t *testing.T, addr, id string, lost *atomic.Int64) paho.Client {
	t.Helper()
	o := paho.NewClientOptions().AddBroker("tcp://" + addr).SetClientID(id).SetCleanSession(true).
		SetAutoReconnect(false).SetConnectTimeout(5 * time.Second).SetMaxResumePubInFlight(1000).
		SetConnectionLostHandler(func(paho.Client, error) { lost.Add(1) })
	c := paho.NewClient(o)
	deadline := time.Now().Add(10 * time.Second)
	for {
		tok := c.Connect()
		tok.Wait()
		if tok.Error() == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("connect %s: %v", id, tok.Error())
		}
		time.Sleep(20 * time.Millisecond) // the listener may still be starting
	}
	t.Cleanup(func() { c.Disconnect(100) })
	return c
}

// TestBridge_ReloadAppliesByDifference reloads while a publisher sends at
// a steady rate on route A: the reload changes A's sender (its URL), adds
// route B and removes route C while C holds a message its target has not
// accepted yet. The listener did not change, so its publishers stay
// connected; B takes messages during the reload; Reload returns only once
// C delivered what it held; every
// message of A the listener acknowledged is delivered (by the old sender
// or the new one), and what is published afterwards reaches the new
// sender and route B.
func TestBridge_ReloadAppliesByDifference(t *testing.T) {
	t.Parallel()
	a1, a2, bSink, cSink := newSink(t), newSink(t), newSink(t), newSink(t)
	entered, release := make(chan struct{}), make(chan struct{})
	var releaseOnce sync.Once
	unblock := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(unblock) // before the sinks close
	var enterOnce sync.Once
	cSink.hook = func(body string) {
		if body == "c-held" {
			enterOnce.Do(func() { close(entered) })
			<-release
		}
	}
	addr, db := freeAddr(t), filepath.Join(t.TempDir(), "outbox.db")
	routeA := `
  - {id: A, receiver: edge, topic: "a/#", sender: a, delivery_mode: shared_outbox,
     session: {id: s, drain_strategy: {type: fixed_poll, interval: 50ms}}}`
	before := reloadConfig(t, "reload", addr, db, fmt.Sprintf(`
  - {id: a, type: http, options: {url: %q}}
  - {id: c, type: http, options: {url: %q}}`, a1.srv.URL, cSink.srv.URL), routeA+`
  - {id: C, receiver: edge, topic: "c/#", sender: c}`)
	after := reloadConfig(t, "reload", addr, db, fmt.Sprintf(`
  - {id: a, type: http, options: {url: %q}}
  - {id: b, type: http, options: {url: %q}}`, a2.srv.URL, bSink.srv.URL), routeA+`
  - {id: B, receiver: edge, topic: "b/#", sender: b}`)
	rt := startBridge(t, before)

	steady := startSteady(t, addr, "steady", "a/x", "a")
	var cLost atomic.Int64
	pubC := connectCounting(t, addr, "pub-c", &cLost)
	held := pubC.Publish("c/x", 1, false, "c-held")
	<-entered
	waitFor(t, 20*time.Second, "A delivering", func() bool { return a1.distinct() > 20 })

	reloaded := make(chan error, 1)
	go func() { reloaded <- rt.Reload(t.Context(), after) }()
	// New route B takes messages once the reload swapped the routes, while
	// C still holds its message.
	for i := 0; bSink.distinct() == 0; i++ {
		if cLost.Load() > 0 || i == 1000 {
			t.Fatalf("route B took no message into the reload (connections lost: %d)", cLost.Load())
		}
		pubC.Publish("b/x", 1, false, fmt.Sprintf("b-during-%d", i))
		time.Sleep(20 * time.Millisecond) // the publishing rate while polling the sink
	}
	select {
	case err := <-reloaded:
		t.Fatalf("Reload returned (%v) while removed route C still held a message", err)
	default:
	}
	unblock()
	if err := <-reloaded; err != nil {
		t.Fatalf("Reload: %v", err)
	}
	if got := senderUpLabels(t, rt); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("gobridge_sender_up series after the reload: %v, want a and b (c was removed)", got)
	}
	if cSink.count("c-held") != 1 {
		t.Fatalf("Reload returned before removed route C delivered what it held (deliveries %d)", cSink.count("c-held"))
	}
	if !held.WaitTimeout(10*time.Second) || held.Error() != nil {
		t.Fatalf("the message C held was not acknowledged: %v", held.Error())
	}

	bTok := steady.c.Publish("b/x", 1, false, "b-after")
	lastA := steady.c.Publish("a/x", 1, false, "a-after")
	waitTokens(t, []paho.Token{bTok, lastA}, 20*time.Second)
	waitFor(t, 20*time.Second, "route B", func() bool { return bSink.count("b-after") == 1 })
	waitFor(t, 20*time.Second, "A's new sender", func() bool { return a2.count("a-after") == 1 })
	if a1.count("a-after") != 0 {
		t.Error("a message published after the reload went to A's old sender")
	}
	acked := steady.acked(t)
	waitFor(t, 30*time.Second, "every acknowledged message of A", func() bool {
		for _, p := range acked {
			if a1.count(p)+a2.count(p) == 0 {
				return false
			}
		}
		return true
	})
	if n := steady.lost.Load() + cLost.Load(); n != 0 || !steady.c.IsConnectionOpen() || !pubC.IsConnectionOpen() {
		t.Fatalf("publishers of the unchanged listener lost their connection (%d times)", n)
	}
	pubC.Publish("c/x", 1, false, "c-after").WaitTimeout(10 * time.Second)
	if cSink.count("c-after") != 0 {
		t.Error("removed route C still delivers")
	}
	t.Logf("%d messages of A acknowledged: %d delivered by the old sender, %d by the new", len(acked), a1.distinct(), a2.distinct())
}

// TestBridge_ReloadRefusesWhatNeedsARestart: a new bridge.id, admin
// listener, lease_ttl or outbox store, changed partitions, and the removal of a route whose records are
// pending are refused with ErrRefused naming each; the running
// configuration keeps running and delivers what it holds.
func TestBridge_ReloadRefusesWhatNeedsARestart(t *testing.T) {
	t.Parallel()
	a := newSink(t)
	a.down.Store(true)
	addr, dir := freeAddr(t), t.TempDir()
	db := filepath.Join(dir, "outbox.db")
	senders := fmt.Sprintf(`
  - {id: a, type: http, options: {url: %q}}`, a.srv.URL)
	routeA := func(partitions int) string {
		return fmt.Sprintf(`
  - {id: A, receiver: edge, topic: "a/#", sender: a, delivery_mode: shared_outbox,
     session: {id: s, partitions: %d, drain_strategy: {type: fixed_poll, interval: 50ms}}}`, partitions)
	}
	routeB := `
  - {id: B, receiver: edge, topic: "b/#", sender: a}`
	rt := startBridge(t, reloadConfig(t, "refuse", addr, db, senders, routeA(1)+routeB))
	pub := publisher(t, "tcp://"+addr, "refuse-pub")
	waitTokens(t, []paho.Token{pub.Publish("a/x", 1, false, "pending")}, 20*time.Second)

	otherAdmin := reloadConfig(t, "refuse", addr, db, senders, routeA(1)+routeB)
	listen := "127.0.0.1:0"
	otherAdmin.Bridge.Admin.Listen = &listen
	otherTTL := reloadConfig(t, "refuse", addr, db, senders, routeA(1)+routeB)
	otherTTL.Bridge.LeaseTTL = routes.Duration(time.Minute)
	for name, tc := range map[string]struct {
		cfg  *routes.Config
		want string
	}{
		"admin listener":  {otherAdmin, "bridge.admin"},
		"lease ttl":       {otherTTL, "bridge.lease_ttl"},
		"bridge id":       {reloadConfig(t, "other", addr, db, senders, routeA(1)+routeB), "bridge.id"},
		"store":           {reloadConfig(t, "refuse", addr, filepath.Join(dir, "other.db"), senders, routeA(1)+routeB), "stores"},
		"partitions":      {reloadConfig(t, "refuse", addr, db, senders, routeA(4)+routeB), "partitions changed from 1 to 4"},
		"pending records": {reloadConfig(t, "refuse", addr, db, senders, routeB), `1 records of route "A"`},
	} {
		err := rt.Reload(t.Context(), tc.cfg)
		if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Reload = %v, want ErrRefused naming %q", name, err, tc.want)
		}
	}
	if got := rt.cur.Load().cfg.Bridge.ID; got != "refuse" {
		t.Fatalf("a refused reload changed the running config (bridge.id %q)", got)
	}
	a.down.Store(false)
	waitFor(t, 20*time.Second, "the pending record", func() bool { return a.count("pending") == 1 })
	waitTokens(t, []paho.Token{pub.Publish("b/x", 1, false, "b-still")}, 20*time.Second)
	if a.count("b-still") != 1 {
		t.Error("route B stopped after refused reloads")
	}
}

// TestBridge_ReloadKeepsAFallbackKeyInTheOutbox: a direct_or_outbox route
// whose ordering key has a record in the outbox is replaced by a reload;
// the key's next message goes to the outbox too, behind that record, not
// direct past it (the successor takes over the keys held in the outbox).
func TestBridge_ReloadKeepsAFallbackKeyInTheOutbox(t *testing.T) {
	t.Parallel()
	s := newSink(t)
	release := make(chan struct{})
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	t.Cleanup(unblock) // before the sink closes
	s.hook = func(body string) {
		if strings.Contains(body, msgID(0)) {
			<-release // the first message's direct send times out; the drainer's waits
		}
	}
	addr, db := freeAddr(t), filepath.Join(t.TempDir(), "outbox.db")
	config := func(directTimeout string) *routes.Config {
		cfg := reloadConfig(t, "sticky", addr, db, fmt.Sprintf(`
  - {id: sink, type: http, options: {url: %q, timeout: 30s}}`, s.srv.URL), `
  - {id: hybrid, receiver: edge, topic: "#", sender: sink, delivery_mode: direct_or_outbox,
     ordering_key: "{topic}", processors: [{type: idempotency_key, from: "{payload.id}"}],
     session: {id: s1}, policy: {direct_timeout: `+directTimeout+`}}`)
		cfg.Bridge.ShutdownTimeout = routes.Duration(time.Second) // the old drainer's blocked send
		return cfg
	}
	b := startBridge(t, config("200ms"))
	pub := publisher(t, "tcp://"+addr, "sticky-pub")
	body := func(i int) string { return fmt.Sprintf(`{"id": %q}`, msgID(i)) }
	waitTokens(t, []paho.Token{pub.Publish("line/0", 1, false, body(0))}, 20*time.Second) // in the outbox now
	if err := b.Reload(t.Context(), config("300ms")); err != nil {
		t.Fatalf("Reload: %v", err)
	}
	waitTokens(t, []paho.Token{pub.Publish("line/0", 1, false, body(1))}, 20*time.Second)
	if n := s.count(body(1)); n != 0 {
		t.Fatalf("after the reload, the key's next message went direct past the record in the outbox (%d deliveries)", n)
	}
	unblock()
	waitFor(t, 30*time.Second, "both messages", func() bool { return s.count(body(0)) > 0 && s.count(body(1)) == 1 })
	s.mu.Lock()
	defer s.mu.Unlock()
	if i0, i1 := slices.Index(s.order, body(0)), slices.Index(s.order, body(1)); i1 < i0 {
		t.Errorf("delivered out of order: %v", s.order)
	}
}

// senderUpLabels lists the senders gobridge_sender_up has a series of.
func senderUpLabels(t *testing.T, b *Bridge) []string {
	t.Helper()
	ch := make(chan prometheus.Metric, 64)
	b.metrics.senderUp.Collect(ch)
	close(ch)
	var out []string
	for m := range ch {
		var d dto.Metric
		if err := m.Write(&d); err != nil {
			t.Fatal(err)
		}
		out = append(out, d.GetLabel()[0].GetValue())
	}
	slices.Sort(out)
	return out
}
