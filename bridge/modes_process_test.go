package bridge

import (
	"database/sql"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/gobridge/gobridge/internal/testservices"
)

// The tests in this file SIGKILL the gobridge binary mid-stream in each
// delivery mode and ingest path, restart it, and then require every message
// acknowledged to its publisher at the sink (DESIGN.md §1.1); duplicates
// are allowed and counted. TestRun_ZeroLossAcrossKills covers
// shared_outbox from Mosquitto, httpingest_process_test.go HTTP ingest.

// killRun is one kill test: a gobridge process on cfg, a publisher of n
// messages (msgID(i)) and a sink.
type killRun struct {
	cfg, admin string
	db         string // the SQLite outbox ("" when there is none)
	s          *sink
	n, kills   int
	// publish sends message i; its token, if not nil, must complete
	// without error before the end (the broker acknowledged it).
	publish func(i int) paho.Token
	// paused, when set, holds the publisher back while it is true.
	paused func() bool
	// acked, when set, reports whether the publisher holds nothing
	// unacknowledged any more (besides the tokens).
	acked func() bool
	// holdSends, when > 0, makes each kill land while that many sends
	// hang at the sink: they are answered 503 after the kill, so they
	// count as deliveries only once sent again.
	holdSends int
}

// gate holds the sink's requests while it is shut; the held ones are
// answered 503 (not delivered) once it opens.
type gate struct {
	mu   sync.Mutex
	shut chan struct{} // nil: open
	held atomic.Int64
}

func (g *gate) hold(string) bool {
	g.mu.Lock()
	shut := g.shut
	g.mu.Unlock()
	if shut == nil {
		return false
	}
	g.held.Add(1)
	<-shut
	return true
}

func (g *gate) close() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.held.Store(0)
	g.shut = make(chan struct{})
}

func (g *gate) open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.shut != nil {
		close(g.shut)
		g.shut = nil
	}
}

// killStats is what a killRun saw.
type killStats struct {
	dups        int   // deliveries beyond the first of a message
	liveAtKills []int // live outbox records found in the file after each kill
}

// run starts the process, publishes n messages paced (about 2,000 msg/s) so
// that the kills land mid-stream, SIGKILLs and restarts the process each
// time the sink reached another share of n, and then waits until every
// message acknowledged to the publisher reached the sink. A message that
// does not arrive fails the test with its id.
func (k killRun) run(t *testing.T) killStats {
	t.Helper()
	bin := gobridgeBinary(t)
	cfgPath, logPath := procFiles(t, t.TempDir(), k.cfg)
	waitUp := func(what string) { t.Helper(); waitFor(t, 20*time.Second, what, procReady(k.admin)) }
	g := &gate{}
	if k.holdSends > 0 {
		fail := k.s.fail
		k.s.fail = func(body string) bool { return g.hold(body) || (fail != nil && fail(body)) }
		t.Cleanup(g.open) // before the sink closes
	}
	p := startProc(t, bin, cfgPath, logPath)
	waitUp("gobridge ready")

	// The publisher goroutine is owned by the test: cleanup stops it and
	// waits for it (registered after the publisher's, so it runs first).
	toks := make([]paho.Token, k.n)
	var published atomic.Int64
	stop, exited := make(chan struct{}), make(chan struct{})
	t.Cleanup(func() { close(stop); <-exited })
	go func() {
		defer close(exited)
		pace := time.NewTicker(10 * time.Millisecond)
		defer pace.Stop()
		tick := func() bool {
			select {
			case <-stop:
				return false
			case <-pace.C:
				return true
			}
		}
		for i := range k.n {
			if i%20 == 0 && !tick() {
				return
			}
			for k.paused != nil && k.paused() {
				if !tick() {
					return
				}
			}
			toks[i] = k.publish(i)
			published.Add(1)
		}
	}()

	var st killStats
	for kill := range k.kills {
		target := int64((kill + 1) * k.n / (k.kills + 2))
		waitFor(t, 60*time.Second, fmt.Sprintf("sink reaching %d before kill %d (published %d)", target, kill+1, published.Load()),
			func() bool { return k.s.total.Load() >= target })
		if k.holdSends > 0 {
			g.close()
			waitFor(t, 30*time.Second, fmt.Sprintf("%d sends hanging at the sink before kill %d", k.holdSends, kill+1),
				func() bool { return g.held.Load() >= int64(k.holdSends) })
		}
		p.kill(t)
		g.open()
		delivered := k.s.distinct()
		if delivered == k.n {
			t.Fatalf("kill %d landed after every message was delivered: not mid-stream", kill+1)
		}
		live := k.liveRecords(t)
		st.liveAtKills = append(st.liveAtKills, live)
		t.Logf("kill %d: %d published, %d delivered, %d live records in the outbox", kill+1, published.Load(), delivered, live)
		p = startProc(t, bin, cfgPath, logPath)
		waitUp("gobridge ready after the restart")
	}
	waitFor(t, 60*time.Second, "the publisher done", func() bool { return published.Load() == int64(k.n) })
	<-exited
	deadline := time.Now().Add(60 * time.Second)
	for i, tok := range toks {
		if tok != nil && !tok.WaitTimeout(time.Until(deadline)) {
			t.Fatalf("message %s not acknowledged to the publisher within 60s", msgID(i))
		} else if tok != nil && tok.Error() != nil {
			t.Fatalf("message %s: %v", msgID(i), tok.Error())
		}
	}
	if k.acked != nil {
		waitFor(t, 60*time.Second, "the publisher holding nothing unacknowledged", k.acked)
	}
	done := time.Now()
	k.waitAll(t, 30*time.Second)
	k.s.mu.Lock()
	for _, c := range k.s.got {
		st.dups += c - 1
	}
	k.s.mu.Unlock()
	t.Logf("%d messages, %d kills: all at the sink %s after the publisher was acknowledged, %d duplicate deliveries",
		k.n, k.kills, time.Since(done).Round(time.Millisecond), st.dups)
	return st
}

// waitAll waits until every message is at the sink, and fails naming the
// ones that are not.
func (k killRun) waitAll(t *testing.T, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for k.s.distinct() < k.n && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond) // polling interval, not synchronisation
	}
	var missing []string
	k.s.mu.Lock()
	for i := range k.n {
		if k.s.got[msgID(i)] == 0 {
			missing = append(missing, msgID(i))
		}
	}
	k.s.mu.Unlock()
	if len(missing) > 0 {
		t.Fatalf("LOST: %d of %d acknowledged messages never reached the sink within %s: %s",
			len(missing), k.n, timeout, strings.Join(missing[:min(len(missing), 50)], " "))
	}
}

// liveRecords counts the live (pending or claimed) records in the outbox
// file of a killed process; 0 without one.
func (k killRun) liveRecords(t *testing.T) int {
	t.Helper()
	if k.db == "" {
		return 0
	}
	db, err := sql.Open("sqlite", "file:"+k.db+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM outbox WHERE state = 0`).Scan(&n); err != nil {
		t.Fatalf("count live records in %s: %v", k.db, err)
	}
	return n
}

// mosquittoPublisher publishes message i on topic with QoS 1 through
// Mosquitto (which stays up: its acknowledgement is the publisher's).
func mosquittoPublisher(t *testing.T, url, id, topic string) func(int) paho.Token {
	pub := publisher(t, url, id)
	return func(i int) paho.Token { return pub.Publish(topic, 1, false, msgID(i)) }
}

// mqttReceiverConfig is a config with an mqtt receiver of Mosquitto on a
// persistent session, an HTTP sender and one route of mode (with extra
// route fields, indented as route fields).
func mqttReceiverConfig(admin, db, mqttURL, run, sinkURL, mode, extra string) string {
	stores := ""
	if db != "" {
		stores = fmt.Sprintf("stores:\n  outbox: {type: sqlite, options: {path: %q}}\n", db)
	}
	return fmt.Sprintf(`version: 1
bridge: {id: %s, admin: {listen: %q}, shutdown_timeout: 5s, log: {level: info, format: text}}
%sreceivers:
  - id: plant
    type: mqtt
    options: {broker_urls: [%s], client_id: gobridge-%s, clean_session: false, keep_alive: 5s, connect_timeout: 2s}
    topics: [{topic: "%s/#", qos: 1}]
senders:
  - {id: sink, type: http, options: {url: %q, timeout: 2s}}
routes:
  - id: r
    receiver: plant
    topic: "%s/#"
    sender: sink
    delivery_mode: %s
%s`, mode, admin, stores, mqttURL, run, run, sinkURL, run, mode, extra)
}

// TestRun_DirectHoldLosesNothingAcrossKills: direct_hold acknowledges a
// message only once the target accepted it, so the messages in flight at a
// kill stay in Mosquitto's persistent session and are redelivered.
func TestRun_DirectHoldLosesNothingAcrossKills(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and kills the gobridge binary")
	}
	mqttURL := testservices.MQTTURL(t)
	s := newSink(t)
	admin, run := freeAddr(t), fmt.Sprintf("hold-%d", time.Now().UnixNano())
	k := killRun{
		cfg: mqttReceiverConfig(admin, "", mqttURL, run, s.srv.URL, "direct_hold",
			"    policy: {send_timeout: 1s, max_in_flight: 50, backoff: {initial_interval: 100ms, max_interval: 1s}}\n"),
		admin: admin, s: s, n: 5000, kills: 2, holdSends: 20,
		publish: mosquittoPublisher(t, mqttURL, "pub-"+run, run+"/line"),
	}
	k.run(t)
}

// TestRun_DirectOrOutboxLosesNothingAcrossKills: the target fails every
// third request, so part of the messages go directly and part through the
// outbox (some are there at each kill); both parts must survive the kills.
func TestRun_DirectOrOutboxLosesNothingAcrossKills(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and kills the gobridge binary")
	}
	mqttURL := testservices.MQTTURL(t)
	s := newSink(t)
	var requests atomic.Int64
	s.fail = func(string) bool { return requests.Add(1)%3 == 0 }
	admin, run := freeAddr(t), fmt.Sprintf("fallback-%d", time.Now().UnixNano())
	db := filepath.Join(t.TempDir(), "outbox.db")
	k := killRun{
		cfg: mqttReceiverConfig(admin, db, mqttURL, run, s.srv.URL, "direct_or_outbox", `    session: {id: s, drain_strategy: {type: fixed_poll, interval: 200ms}}
    policy: {direct_timeout: 1s, send_timeout: 1s, backoff: {initial_interval: 100ms, max_interval: 1s}}
`),
		admin: admin, db: db, s: s, n: 5000, kills: 2, holdSends: 20,
		publish: mosquittoPublisher(t, mqttURL, "pub-"+run, run+"/line"),
	}
	st := k.run(t)
	if slices.Max(st.liveAtKills) == 0 {
		t.Errorf("no kill found records in the outbox (%v): the outbox part was not tested", st.liveAtKills)
	}
}

// TestRun_ListenerLosesNothingAcrossKills: a paho publisher on a
// persistent session publishes to the embedded listener, which feeds a
// shared_outbox route; after each kill the publisher reconnects and sends
// again what the listener had not acknowledged. Every message the listener
// acknowledged must reach the sink: at the end the publisher holds nothing
// unacknowledged, so every message must be there.
func TestRun_ListenerLosesNothingAcrossKills(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and kills the gobridge binary")
	}
	s := newSink(t)
	admin, listen := freeAddr(t), freeAddr(t)
	db := filepath.Join(t.TempDir(), "outbox.db")
	cfg := fmt.Sprintf(`version: 1
bridge: {id: listener-kill, admin: {listen: %q}, shutdown_timeout: 5s, log: {level: info, format: text}}
stores:
  outbox: {type: sqlite, options: {path: %q}}
receivers:
  - {id: edge, type: mqtt_listener, options: {listen: %q}, topics: [{topic: "line/#", qos: 1}]}
senders:
  - {id: sink, type: http, options: {url: %q, timeout: 2s}}
routes:
  - id: r
    receiver: edge
    topic: "line/#"
    sender: sink
    delivery_mode: shared_outbox
    session: {id: s, drain_strategy: {type: fixed_poll, interval: 200ms}}
    policy: {send_timeout: 1s, backoff: {initial_interval: 100ms, max_interval: 1s}}
`, admin, db, listen, s.srv.URL)

	store := paho.NewMemoryStore()
	o := paho.NewClientOptions().AddBroker("tcp://" + listen).SetClientID("listener-kill-pub").
		SetCleanSession(false).SetStore(store).SetAutoReconnect(true).SetMaxReconnectInterval(100 * time.Millisecond).
		SetConnectTimeout(2 * time.Second).SetMaxResumePubInFlight(1000).SetWriteTimeout(5 * time.Second)
	var reconnects atomic.Int64
	o.SetOnConnectHandler(func(paho.Client) { reconnects.Add(1) })
	pub := paho.NewClient(o)
	k := killRun{
		cfg: cfg, admin: admin, db: db, s: s, n: 5000, kills: 2,
		// The token of a message resent after a reconnect completes when
		// paho resends it, not when it is acknowledged: the store says
		// what is still unacknowledged.
		publish: func(i int) paho.Token { pub.Publish("line/1", 1, false, msgID(i)); return nil },
		acked: func() bool {
			return !slices.ContainsFunc(store.All(), func(key string) bool { return strings.HasPrefix(key, "o.") })
		},
	}
	// The publisher connects once the listener is up (run starts the
	// process first), and waits while it is disconnected.
	connected := false
	k.paused = func() bool {
		if !connected {
			if tok := pub.Connect(); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
				return true
			}
			connected = true
		}
		return !pub.IsConnectionOpen()
	}
	t.Cleanup(func() { pub.Disconnect(100) })
	k.run(t)
	t.Logf("the publisher connected %d times", reconnects.Load())
}
