package bridge

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/gobridge/gobridge/routes"
	"github.com/gobridge/gobridge/stores"
)

// readyz returns /readyz's status code and body from the admin listener.
func readyz(t *testing.T, rt *Bridge) (int, string) {
	t.Helper()
	return httpGet(t, "http://"+rt.AdminAddr()+"/readyz")
}

func waitReadyz(t *testing.T, rt *Bridge, code int, contains string) {
	t.Helper()
	var last string
	waitFor(t, 30*time.Second, fmt.Sprintf("/readyz %d %q (last: %s)", code, contains, last), func() bool {
		c, body := readyz(t, rt)
		last = body
		return c == code && strings.Contains(body, contains)
	})
}

func TestReadiness_FailsWhileTheBrokerIsGone(t *testing.T) {
	t.Parallel()
	addr := freeAddr(t)
	stop := startBroker(t, addr)
	s := newSink(t)
	cfg := parseConfig(t, mqttClientConfig(addr, "gobridge-ready", "127.0.0.1:0", s.srv.URL, ""))
	rt := startBridge(t, cfg)
	waitReadyz(t, rt, 200, `"ready":true`)
	if c, _ := httpGet(t, "http://"+rt.AdminAddr()+"/healthz"); c != 200 {
		t.Fatalf("/healthz %d", c)
	}

	stop()
	waitReadyz(t, rt, 503, "receiver plant")

	startBroker(t, addr)
	waitReadyz(t, rt, 200, `"ready":true`)
	if _, body := httpGet(t, "http://"+rt.AdminAddr()+"/metrics"); !strings.Contains(body, `gobridge_receiver_reconnects_total{receiver="plant"} 1`) ||
		!strings.Contains(body, `gobridge_receiver_connected{receiver="plant"}`) {
		t.Errorf("metrics lack the reconnect of receiver plant")
	}
}

func TestReadiness_FailsWhileASessionStalls(t *testing.T) {
	t.Parallel()
	s := newSink(t)
	s.down.Store(true)
	addr := freeAddr(t)
	cfg := parseConfig(t, listenerConfig(addr, "127.0.0.1:0", "{type: memory}",
		fmt.Sprintf(`  - {id: sink, type: http, options: {url: %q}}`, s.srv.URL), `
  - id: buffered
    receiver: edge
    topic: "#"
    sender: sink
    delivery_mode: shared_outbox
    session: {id: s1, drain_strategy: {type: fixed_poll, interval: 100ms}}
    policy: {stall_after: 1s, backoff: {initial_interval: 100ms, max_interval: 200ms}}`))
	rt := startBridge(t, cfg)
	waitReadyz(t, rt, 200, `"ready":true`)

	pub := publisher(t, "tcp://"+addr, "stall")
	tok := pub.Publish("line/x", 1, false, "one")
	waitTokens(t, []paho.Token{tok}, 10*time.Second)
	waitReadyz(t, rt, 503, "session s1: stalled")

	s.down.Store(false)
	waitReadyz(t, rt, 200, `"ready":true`)
	if s.distinct() != 1 {
		t.Fatalf("sink got %d messages, want 1", s.distinct())
	}
}

// A target whose certificate does not verify is the target's failure: the
// record waits (no dead letter) and /readyz names the TLS error, not only
// the stall.
func TestReadiness_NamesTheTargetErrorOfAStalledSession(t *testing.T) {
	t.Parallel()
	srv := httptest.NewTLSServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	t.Cleanup(srv.Close)
	addr := freeAddr(t)
	rt := startBridge(t, parseConfig(t, listenerConfig(addr, "127.0.0.1:0", "{type: memory}",
		fmt.Sprintf(`  - {id: tls, type: http, options: {url: %q}}`, srv.URL), `
  - id: buffered
    receiver: edge
    topic: "#"
    sender: tls
    delivery_mode: shared_outbox
    session: {id: s1, drain_strategy: {type: fixed_poll, interval: 100ms}}
    policy: {stall_after: 1s, backoff: {initial_interval: 100ms, max_interval: 200ms}}`)))
	pub := publisher(t, "tcp://"+addr, "stall-tls")
	waitTokens(t, []paho.Token{pub.Publish("line/x", 1, false, "one")}, 10*time.Second)
	waitReadyz(t, rt, 503, "certificate signed by unknown authority")
	if dead, _, err := rt.store.Dead(t.Context(), stores.DeadQuery{}); err != nil || len(dead) != 0 {
		t.Fatalf("%d dead letters (%v), want none", len(dead), err)
	}
}

// Outbox stats read before a reload removed a session set none of its
// gauges after it: the reload forgot them, and a process reloaded for
// months with changing sessions keeps only the series of what runs. The
// reload churn test found it under load (one series more after 150
// reloads): the monitor's Stats had seen the removed session's record.
func TestBridge_StatsOlderThanAReloadSetNoGaugeOfARemovedSession(t *testing.T) {
	t.Parallel()
	config := func(extra string) *routes.Config {
		return parseConfig(t, listenerConfig(freeAddr(t), "", "{type: memory}", `  - {id: out, type: stdout}`, `
  - {id: a, receiver: edge, topic: "a/#", sender: out, delivery_mode: shared_outbox, session: {id: sa}}`+extra))
	}
	reg := prometheus.NewRegistry()
	b, err := New(config(`
  - {id: gone, receiver: edge, topic: "g/#", sender: out, delivery_mode: shared_outbox, session: {id: sgone}}`),
		Options{Logger: testLogger(t), Stdout: io.Discard, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	startRun(t, b)
	waitFor(t, time.Minute, "the bridge to run", func() bool { b.mu.Lock(); defer b.mu.Unlock(); return b.running })
	stats := []stores.SessionStats{{Session: "sa", Live: 1}, {Session: "sgone", Live: 1}} // as the monitor read them
	if err := b.Reload(t.Context(), config("")); err != nil {
		t.Fatal(err)
	}
	b.outboxGauges(stats, time.Now())
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "session" && l.GetValue() == "sgone" {
					t.Errorf("%s{session=%q} set after the reload removed the session", mf.GetName(), l.GetValue())
				}
			}
		}
	}
}

// gobridge_dead_letters{route} counts a route's dead letters in every
// session, as max_dead_letters and /readyz do: a route moved to another
// session keeps the dead letters it made in the old one (they are not
// moved), and the gauge dropped them once the old session was no longer
// configured.
func TestBridge_DeadLettersGaugeCountsThoseLeftInAnEarlierSession(t *testing.T) {
	t.Parallel()
	addr := freeAddr(t)
	config := func(session string) *routes.Config {
		return parseConfig(t, fmt.Sprintf(`version: 1
bridge: {id: test, admin: {listen: ""}}
stores: {outbox: {type: memory}}
receivers:
  - id: edge
    type: mqtt_listener
    options: {listen: %q, allow_anonymous: true, max_payload_bytes: 4096}
    topics: [{topic: "#", qos: 1}]
senders:
  - {id: out, type: stdout}
routes:
  - {id: a, receiver: edge, topic: "#", sender: out, delivery_mode: shared_outbox, session: {id: %s}}
`, addr, session))
	}
	rt, err := New(config("before"), Options{Logger: testLogger(t), Stdout: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	startRun(t, rt)
	gauge := func(want string) func() bool {
		return func() bool {
			rec := httptest.NewRecorder()
			rt.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
			return strings.Contains(rec.Body.String(), `gobridge_dead_letters{route="a"} `+want+"\n")
		}
	}
	pub := publisher(t, "tcp://"+addr, "dead-gauge")
	waitTokens(t, []paho.Token{pub.Publish("line/1", 1, false, strings.Repeat("x", 5000))}, 10*time.Second)
	waitFor(t, time.Minute, "gobridge_dead_letters{route=a} 1", gauge("1"))

	if err := rt.Reload(t.Context(), config("after")); err != nil {
		t.Fatal(err)
	}
	waitTokens(t, []paho.Token{pub.Publish("line/2", 1, false, strings.Repeat("y", 5000))}, 10*time.Second)
	if dead, _, err := rt.store.Dead(t.Context(), stores.DeadQuery{Route: "a"}); err != nil || len(dead) != 2 {
		t.Fatalf("%d dead letters of route a (%v), want 2", len(dead), err)
	}
	waitFor(t, time.Minute, "gobridge_dead_letters{route=a} 2 (one in each session)", gauge("2"))
}
