package bridge

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/gobridge/gobridge/admin"
	"github.com/gobridge/gobridge/routes"
	"github.com/gobridge/gobridge/stores"
)

// listenerConfig is a config with an embedded listener on addr, a memory
// outbox and the given senders and routes (YAML list items).
func listenerConfig(addr, admin, store, senders, routesYAML string) string {
	return fmt.Sprintf(`version: 1
bridge:
  id: test
  admin: {listen: %q}
  shutdown_timeout: 10s
stores:
  outbox: %s
receivers:
  - id: edge
    type: mqtt_listener
    options: {listen: %q}
    topics: [{topic: "#", qos: 1}]
senders:
%s
routes:
%s
`, admin, store, addr, senders, routesYAML)
}

func TestBridge_FansOutToEveryMatchingRoute(t *testing.T) {
	t.Parallel()
	a, b := newSink(t), newSink(t)
	addr := freeAddr(t)
	cfg := parseConfig(t, listenerConfig(addr, "", "{type: memory}", fmt.Sprintf(`
  - {id: a, type: http, options: {url: %q}}
  - {id: b, type: http, options: {url: %q}}`, a.srv.URL, b.srv.URL), `
  - id: outbox-all
    receiver: edge
    topic: "#"
    sender: a
    delivery_mode: shared_outbox
    session: {id: s1, drain_strategy: {type: fixed_poll, interval: 50ms}}
  - id: direct-plant
    receiver: edge
    topic: "plant/#"
    sender: b
  - id: filtered
    receiver: edge
    topic: "plant/#"
    sender: b
    processors: [{type: filter, expr: "false"}]`))
	rt := startBridge(t, cfg)
	pub := publisher(t, "tcp://"+addr, "pub")
	const n = 300
	var toks []paho.Token
	for i := range n {
		topic := "other/x"
		if i%2 == 0 {
			topic = "plant/x"
		}
		toks = append(toks, pub.Publish(topic, 1, false, msgID(i)))
	}
	waitTokens(t, toks, 20*time.Second)
	waitFor(t, 20*time.Second, "every message at sink a", func() bool { return a.distinct() == n })
	waitFor(t, 20*time.Second, "plant messages at sink b", func() bool { return b.distinct() == n/2 })
	for i := range n {
		if i%2 == 0 && b.count(msgID(i)) == 0 {
			t.Fatalf("plant message %d missing at b", i)
		}
		if i%2 == 1 && b.count(msgID(i)) != 0 {
			t.Fatalf("other message %d delivered to b", i)
		}
	}
	rec := httptest.NewRecorder()
	rt.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	for _, want := range []string{
		`gobridge_route_filtered_total{route="filtered"} 150`,
		`gobridge_route_persisted_total{route="outbox-all"} 300`,
		`gobridge_ingest_acked_total{receiver="edge"} 300`,
	} {
		if !strings.Contains(rec.Body.String(), want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

func TestBridge_AcksOnlyWhenEveryRouteSettled(t *testing.T) {
	t.Parallel()
	up, down := newSink(t), newSink(t)
	down.down.Store(true)
	addr := freeAddr(t)
	cfg := parseConfig(t, listenerConfig(addr, "", "{type: memory}", fmt.Sprintf(`
  - {id: up, type: http, options: {url: %q}}
  - {id: down, type: http, options: {url: %q}}`, up.srv.URL, down.srv.URL), `
  - id: persisted
    receiver: edge
    topic: "#"
    sender: up
    delivery_mode: shared_outbox
    session: {id: s1}
  - id: held
    receiver: edge
    topic: "#"
    sender: down
    policy: {backoff: {initial_interval: 50ms, max_interval: 100ms}}`))
	startBridge(t, cfg)
	pub := publisher(t, "tcp://"+addr, "both")
	tok := pub.Publish("line/x", 1, false, "m")
	waitFor(t, 10*time.Second, "the outbox route delivering", func() bool { return up.distinct() == 1 })
	deadline := time.Now().Add(300 * time.Millisecond)
	for time.Now().Before(deadline) {
		if tokenDone(tok) {
			t.Fatal("message acknowledged while one of its routes is still holding it")
		}
		time.Sleep(10 * time.Millisecond) // polling interval
	}
	down.down.Store(false)
	waitTokens(t, []paho.Token{tok}, 10*time.Second)
	if down.distinct() != 1 {
		t.Fatalf("held route delivered %d messages, want 1", down.distinct())
	}
}

// TestNew_ReturnsAPartsFailure checks that New reports a part it cannot
// build as an error (it used to panic while discarding what it had built),
// and releases the outbox it opened, so a second New can take its file.
func TestNew_ReturnsAPartsFailure(t *testing.T) {
	db := filepath.Join(t.TempDir(), "outbox.db")
	yml := fmt.Sprintf(`version: 1
bridge: {id: parts, admin: {listen: ""}}
stores: {outbox: {type: sqlite, options: {path: %q}}}
receivers:
  - {id: edge, type: mqtt_listener, options: {listen: "127.0.0.1:0", allow_anonymous: true}, topics: [{topic: "#"}]}
senders:
  - {id: out, type: stdout}
routes:
  - {id: all, receiver: edge, topic: "#", sender: out, delivery_mode: shared_outbox, session: {id: s}}
`, db)
	cfg := parseConfig(t, yml)
	cfg.Routes[0].Sender = "gone" // no config check lets this through; a part that fails to build is the same path
	if _, err := New(cfg, Options{Stdout: io.Discard}); err == nil || !strings.Contains(err.Error(), `unknown sender "gone"`) {
		t.Fatalf("New = %v, want the unknown sender", err)
	}
	b, err := New(parseConfig(t, yml), Options{Stdout: io.Discard})
	if err != nil {
		t.Fatalf("New after a failed New: %v", err)
	}
	b.Close()
}

// A shutdown during a reload keeps its bound: shutdown_timeout counts from
// the signal, not from the end of the reload, so what the timeout cancels
// cuts the reload short. Before, the timeout started once the reload had
// waited out the drainer's flush (10 s).
func TestBridge_AShutdownDuringAReloadKeepsItsBound(t *testing.T) {
	t.Parallel()
	b, stop, reloaded := startStuckReload(t)
	stopped := make(chan struct{})
	go func() { defer close(stopped); stop() }()
	if err := <-reloaded; err != nil {
		t.Fatalf("Reload: %v", err)
	}
	if b.writer.abortCtx.Err() == nil {
		t.Error("the reload ended before the shutdown timeout cut it short: the timeout started after it")
	}
	<-stopped
}

// A requeue through the admin API while a reload runs fails at once,
// saying so, rather than wait for the reload (which may take several
// shutdown_timeouts) past the CLI's 30 s timeout.
func TestOutbox_RequeueDuringAReloadSaysSo(t *testing.T) {
	t.Parallel()
	b, _, reloaded := startStuckReload(t)
	requeued := make(chan error, 1)
	go func() {
		_, err := (*Outbox)(b).Requeue(t.Context(), msgID(0), "a", "")
		requeued <- err
	}()
	select {
	case err := <-requeued:
		if !errors.Is(err, admin.ErrReloading) {
			t.Errorf("Requeue = %v; want admin.ErrReloading", err)
		}
	case <-reloaded:
		t.Error("the requeue waited for the reload to end")
	}
}

// Requeues wait for one another: only a reload makes one fail at once.
// Here the test holds the lock a requeue in progress holds.
func TestOutbox_RequeuesWaitForEachOther(t *testing.T) {
	t.Parallel()
	yml := listenerConfig(freeAddr(t), "", fmt.Sprintf("{type: sqlite, options: {path: %q}}", filepath.Join(t.TempDir(), "outbox.db")),
		`  - {id: out, type: stdout}`, `
  - {id: a, receiver: edge, topic: "a/#", sender: out, delivery_mode: shared_outbox, session: {id: sa}}`)
	b, _ := runStoppable(t, parseConfig(t, yml))
	b.mu.Lock()
	requeued, started := make(chan error, 1), make(chan struct{})
	go func() {
		close(started)
		_, err := (*Outbox)(b).Requeue(t.Context(), "no-such-letter", "a", "")
		requeued <- err
	}()
	<-started
	var early error
	select {
	case early = <-requeued: // before the fix: at once, ErrReloading
	case <-time.After(100 * time.Millisecond): // room for that; either way the result is checked below
	}
	b.mu.Unlock()
	if early == nil {
		early = <-requeued
	}
	if !errors.Is(early, stores.ErrNotFound) {
		t.Errorf("Requeue = %v; want ErrNotFound once the other requeue is done", early)
	}
}

// startStuckReload runs a bridge (shutdown_timeout 1s) whose store refuses
// to record deliveries, and a reload that replaces its session: stopping
// the old drainer waits for the writer to flush its outcomes, which only
// the shutdown timeout aborts (else the drainer's 10 s flush timeout). It
// returns once the reload holds the bridge; reloaded gets its result.
func startStuckReload(t *testing.T) (b *Bridge, stop func(), reloaded chan error) {
	t.Helper()
	s := newSink(t)
	gate := make(chan struct{}) // the target answers once the store fails
	s.hook = func(string) { <-gate }
	addr, db := freeAddr(t), filepath.Join(t.TempDir(), "outbox.db")
	config := func(url string) *routes.Config {
		yml := listenerConfig(addr, "", fmt.Sprintf("{type: sqlite, options: {path: %q}}", db),
			fmt.Sprintf(`  - {id: sink, type: http, options: {url: %q}}`, url), `
  - {id: a, receiver: edge, topic: "a/#", sender: sink, delivery_mode: shared_outbox, session: {id: sa}}`)
		return parseConfig(t, strings.Replace(yml, "shutdown_timeout: 10s", "shutdown_timeout: 1s", 1))
	}
	b, stop = runStoppable(t, config(s.srv.URL))
	pub := publisher(t, "tcp://"+addr, "reload-"+t.Name())
	var toks []paho.Token
	for i := range 5 {
		toks = append(toks, pub.Publish("a/1", 1, false, msgID(i)))
	}
	waitTokens(t, toks, 20*time.Second)
	_ = failOnSQLite(t, db)
	close(gate)
	waitFor(t, 20*time.Second, "the sink to receive them", func() bool { return s.distinct() == 5 })
	waitFor(t, 20*time.Second, "a write to fail", func() bool { return b.writer.failingFor() > 0 })

	reloaded = make(chan error, 1)
	go func() { reloaded <- b.Reload(context.Background(), config(s.srv.URL+"?v=2")) }()
	waitFor(t, 20*time.Second, "the reload to begin", func() bool {
		if len(reloaded) > 0 || !b.mu.TryLock() {
			return true
		}
		b.mu.Unlock()
		return false
	})
	return b, stop, reloaded
}

// A shutdown ends within shutdown_timeout plus the hard-stop grace even
// when a reload never ends (held here by the test), and says what it
// abandoned. Before, Run waited for the reload before its timeout began.
func TestBridge_AShutdownBehindAReloadThatNeverEndsSaysSo(t *testing.T) {
	t.Parallel()
	cfg := listenerConfig(freeAddr(t), "", "{type: memory}", `  - {id: out, type: stdout}`, `
  - {id: a, receiver: edge, topic: "a/#", sender: out, delivery_mode: shared_outbox, session: {id: sa}}`)
	b, err := New(parseConfig(t, strings.Replace(cfg, "shutdown_timeout: 10s", "shutdown_timeout: 100ms", 1)),
		Options{Logger: testLogger(t), Stdout: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	ran := make(chan error, 1)
	go func() { ran <- b.Run(ctx) }()
	waitFor(t, 20*time.Second, "the bridge to run", func() bool { // then hold it as a reload does
		if !b.mu.TryLock() {
			return false
		} else if !b.running {
			b.mu.Unlock()
			return false
		}
		return true
	})
	defer b.mu.Unlock()
	cancel()
	select {
	case err := <-ran:
		if !errors.Is(err, ErrShutdownTimeout) || !strings.Contains(err.Error(), "reload") {
			t.Errorf("Run = %v; want ErrShutdownTimeout naming the reload", err)
		}
	case <-time.After(time.Minute): // liveness bound, not a speed check
		t.Fatal("Run did not return a minute after its context ended, behind a reload that never ends")
	}
}
