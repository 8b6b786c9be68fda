package bridge

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"runtime"
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
	"github.com/gobridge/gobridge/stores"
)

// holdRoute is a direct_hold route H on topic h/# to sender h.
func holdRoute(policy string) string {
	return fmt.Sprintf(`
  - {id: H, receiver: edge, topic: "h/#", sender: h, delivery_mode: direct_hold, policy: {%s}}`, policy)
}

// takes reports whether receiver edge of b routes through route id now.
func takes(b *Bridge, id string) bool {
	in := b.cur.Load().receiver("edge").in
	in.mu.RLock()
	defer in.mu.RUnlock()
	return slices.ContainsFunc(in.routes, func(r *route) bool { return r.id == id })
}

// TestBridge_ReloadAddingARouteToASessionDeadLettersNothing: a reload adds
// route N to session s, which keeps running route A, while a changed
// direct_hold route H takes its time to settle (its target hangs). A
// message N takes during that reload must reach N's target: not the old
// drainer of s, which does not know N and would dead-letter it as an
// "unknown route".
func TestBridge_ReloadAddingARouteToASessionDeadLettersNothing(t *testing.T) {
	t.Parallel()
	aSink, nSink, hSink := newSink(t), newSink(t), newSink(t)
	hang, hung := make(chan struct{}), make(chan struct{}, 1)
	release := sync.OnceFunc(func() { close(hang) })
	hSink.hook = func(body string) {
		if body == "h-0" {
			hung <- struct{}{}
			<-hang
		}
	}
	addr, db := freeAddr(t), filepath.Join(t.TempDir(), "outbox.db")
	senders := fmt.Sprintf(`
  - {id: a, type: http, options: {url: %q}}
  - {id: n, type: http, options: {url: %q}}
  - {id: h, type: http, options: {url: %q}}`, aSink.srv.URL, nSink.srv.URL, hSink.srv.URL)
	a := sessionRoute("A", "a/#", "a", "")
	rt := startBridge(t, reloadConfig(t, "addroute", addr, db, senders, a+holdRoute("")))
	t.Cleanup(release) // before the bridge stops
	pub := publisher(t, "tcp://"+addr, "addroute-pub")
	h0 := pub.Publish("h/x", 1, false, "h-0")
	<-hung // H holds h-0 until hang is closed

	after := reloadConfig(t, "addroute", addr, db, senders, a+holdRoute("send_timeout: 20s")+sessionRoute("N", "n/#", "n", ""))
	reloaded := make(chan error, 1)
	go func() { reloaded <- rt.Reload(t.Context(), after) }()
	waitFor(t, 20*time.Second, "the listener to route through N", func() bool { return takes(rt, "N") })
	n0 := pub.Publish("n/x", 1, false, "n-0")
	// n-0 is dead-lettered by the old drainer, or waits for the switch.
	waitFor(t, 20*time.Second, "n-0 dead-lettered or waiting for the switch", func() bool {
		return sessionStats(t, rt, "s").Routes["N"].Dead > 0 || counted(rt.metrics.received.WithLabelValues("edge")) == 2 && gated(rt, "N")
	})
	noDeadLetters(t, rt)
	release()
	if err := <-reloaded; err != nil {
		t.Fatalf("Reload: %v", err)
	}
	waitTokens(t, []paho.Token{h0, n0}, 20*time.Second)
	waitFor(t, 20*time.Second, "n-0 at N", func() bool { return nSink.count("n-0") == 1 })
	noDeadLetters(t, rt)
}

// gated reports whether the listener's route id waits for a reload's switch.
func gated(b *Bridge, id string) bool {
	in := b.cur.Load().receiver("edge").in
	in.mu.RLock()
	defer in.mu.RUnlock()
	i := slices.IndexFunc(in.routes, func(r *route) bool { return r.id == id })
	if i < 0 || in.routes[i].ready == nil {
		return false
	}
	select {
	case <-in.routes[i].ready:
		return false
	default:
		return true
	}
}

func counted(c prometheus.Counter) float64 {
	var m dto.Metric
	_ = c.Write(&m)
	return m.GetCounter().GetValue()
}

// TestBridge_RequeueDuringAReloadThatRemovesItsRoute: a dead letter of
// route R is requeued while a reload that removes R is under way (a
// changed direct_hold route H takes its time to settle). Either the
// requeue comes first, and the reload sees R's pending record, or it comes
// after, and R is not in the configuration: never both applied, which
// would leave a record that no drainer of the new configuration delivers.
func TestBridge_RequeueDuringAReloadThatRemovesItsRoute(t *testing.T) {
	t.Parallel()
	kSink, hSink := newSink(t), newSink(t)
	var status atomic.Int32 // R's target: 400 (a dead letter), then down
	status.Store(http.StatusBadRequest)
	rSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(int(status.Load()))
	}))
	t.Cleanup(rSrv.Close)
	hang, hung := make(chan struct{}), make(chan struct{}, 1)
	release := sync.OnceFunc(func() { close(hang) })
	hSink.hook = func(body string) {
		if body == "h-0" {
			hung <- struct{}{}
			<-hang
		}
	}
	addr, db := freeAddr(t), filepath.Join(t.TempDir(), "outbox.db")
	senders := fmt.Sprintf(`
  - {id: k, type: http, options: {url: %q}}
  - {id: r, type: http, options: {url: %q}}
  - {id: h, type: http, options: {url: %q}}`, kSink.srv.URL, rSrv.URL, hSink.srv.URL)
	k := sessionRoute("K", "k/#", "k", "")
	rt := startBridge(t, reloadConfig(t, "requeue", addr, db, senders, k+sessionRoute("R", "r/#", "r", "")+holdRoute("")))
	t.Cleanup(release) // before the bridge stops
	pub := publisher(t, "tcp://"+addr, "requeue-pub")
	waitTokens(t, []paho.Token{pub.Publish("r/x", 1, false, "r-0")}, 20*time.Second)
	var dead []stores.Record
	waitFor(t, 20*time.Second, "R's dead letter", func() bool {
		dead, _, _ = rt.store.Dead(t.Context(), stores.DeadQuery{Route: "R"})
		return len(dead) == 1
	})
	status.Store(http.StatusServiceUnavailable)
	h0 := pub.Publish("h/x", 1, false, "h-0")
	<-hung // H holds h-0 until hang is closed

	reloaded, requeued := make(chan error, 1), make(chan error, 1)
	go func() {
		reloaded <- rt.Reload(t.Context(), reloadConfig(t, "requeue", addr, db, senders, k+holdRoute("send_timeout: 20s")))
	}()
	waitFor(t, 20*time.Second, "the reload to switch the routes", func() bool { return gated(rt, "H") })
	go func() {
		_, err := (*Outbox)(rt).Requeue(t.Context(), dead[0].Envelope.ID, "", "")
		requeued <- err
	}()
	waitFor(t, 20*time.Second, "the requeue to return or to wait for the reload", func() bool {
		buf := make([]byte, 1<<20)
		return len(requeued) == 1 || waitsForLock.Match(buf[:runtime.Stack(buf, true)])
	})
	release()
	reqErr, reloadErr := <-requeued, <-reloaded
	waitTokens(t, []paho.Token{h0}, 20*time.Second)
	if reqErr == nil && reloadErr == nil {
		t.Fatalf("the requeue of R's dead letter and the reload removing R were both applied: session s holds %+v", sessionStats(t, rt, "s").Routes)
	}
	t.Logf("requeue: %v; reload: %v", reqErr, reloadErr)
}

// waitsForLock matches a goroutine dump in which Outbox.Requeue waits for a
// mutex.
var waitsForLock = regexp.MustCompile(`sync\.\(\*Mutex\)\.Lock\(.*\n.*\n.*bridge\.\(\*Outbox\)\.Requeue\(`)

// TestBridge_ReloadRefusesToRemoveABusyRouteWithPendingRecords: route A,
// to be removed by a reload, has a record in the outbox that its target
// has not accepted yet, and a message waiting for room in its full
// session, so it does not settle within shutdown_timeout. The reload must
// be refused (the record is pending): applied, it would leave the record
// to a drainer that does not know A.
func TestBridge_ReloadRefusesToRemoveABusyRouteWithPendingRecords(t *testing.T) {
	t.Parallel()
	kSink, aSink := newSink(t), newSink(t)
	kSink.down.Store(true)
	hang, hung := make(chan struct{}), make(chan struct{}, 1)
	release := sync.OnceFunc(func() { close(hang) })
	aSink.hook = func(body string) {
		if body == "a-0" {
			hung <- struct{}{}
			<-hang
		}
	}
	addr, db := freeAddr(t), filepath.Join(t.TempDir(), "outbox.db")
	senders := fmt.Sprintf(`
  - {id: k, type: http, options: {url: %q}}
  - {id: a, type: http, options: {url: %q}}`, kSink.srv.URL, aSink.srv.URL)
	k := sessionRoute("K", "k/#", "k", "max_outbox_depth: 2, send_timeout: 60s")
	short := func(yml string) *routes.Config {
		cfg := reloadConfig(t, "busy", addr, db, senders, yml)
		cfg.Bridge.ShutdownTimeout = routes.Duration(2 * time.Second)
		return cfg
	}
	rt := startBridge(t, short(k+sessionRoute("A", "a/#", "a", "max_outbox_depth: 2, send_timeout: 60s")))
	t.Cleanup(release) // before the bridge stops
	pub := publisher(t, "tcp://"+addr, "busy-pub")
	waitTokens(t, []paho.Token{pub.Publish("k/x", 1, false, "k-0"), pub.Publish("a/x", 1, false, "a-0")}, 20*time.Second)
	<-hung // a-0 is in flight until hang is closed; session s is full
	pub.Publish("a/x", 1, false, "a-1")
	waitFor(t, 20*time.Second, "route A to take a-1", func() bool { return counted(rt.metrics.routeReceived.WithLabelValues("A")) == 2 })
	if err := rt.Reload(t.Context(), short(k)); !errors.Is(err, ErrRefused) {
		t.Fatalf("Reload removing A with a-0 pending: %v, want ErrRefused; session s holds %+v", err, sessionStats(t, rt, "s").Routes)
	}
}

// TestBridge_ReloadRemovingARouteWhoseSenderIsDown: route L, to be
// removed, has no record in the outbox when the reload starts, but takes
// one in during the reload (it waited for room in its full session); its
// sender is down (a direct_hold route on the same sender holds failing
// messages). The reload must be refused, as for any pending record of a
// removed route: applied, it would leave l-0 to a drainer that does not
// know L.
func TestBridge_ReloadRemovingARouteWhoseSenderIsDown(t *testing.T) {
	t.Parallel()
	kSink, xSink := newSink(t), newSink(t)
	kSink.down.Store(true)
	xSink.down.Store(true)
	addr, db := freeAddr(t), filepath.Join(t.TempDir(), "outbox.db")
	senders := fmt.Sprintf(`
  - {id: k, type: http, options: {url: %q}}
  - {id: x, type: http, options: {url: %q}}`, kSink.srv.URL, xSink.srv.URL)
	kd := sessionRoute("K", "k/#", "k", "max_outbox_depth: 1, max_in_flight: 4") + `
  - {id: D, receiver: edge, topic: "d/#", sender: x, delivery_mode: direct_hold, policy: {max_in_flight: 4}}`
	short := func(yml string) *routes.Config {
		cfg := reloadConfig(t, "down", addr, db, senders, yml)
		cfg.Bridge.ShutdownTimeout = routes.Duration(2 * time.Second)
		return cfg
	}
	rt := startBridge(t, short(kd+sessionRoute("L", "l/#", "x", "max_outbox_depth: 1, max_in_flight: 4")))
	pubD := publisher(t, "tcp://"+addr, "down-pub-d")
	for i := range 3 {
		pubD.Publish("d/x", 1, false, fmt.Sprintf("d-%d", i))
	}
	x := rt.cur.Load().route("L").health
	waitFor(t, 20*time.Second, "sender x down", func() bool { return !x.Up() })
	pub := publisher(t, "tcp://"+addr, "down-pub")
	waitTokens(t, []paho.Token{pub.Publish("k/x", 1, false, "k-0")}, 20*time.Second) // session s is full
	pub.Publish("l/x", 1, false, "l-0")
	waitFor(t, 20*time.Second, "route L to take l-0", func() bool { return counted(rt.metrics.routeReceived.WithLabelValues("L")) == 1 })

	// While L still waits for room past shutdown_timeout, the reload is
	// refused: applied, it would stop waiting for L, which could still
	// commit l-0 (and did, on a loaded machine, once room came).
	if err := rt.Reload(t.Context(), short(kd)); !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "route L is still taking a message in") {
		t.Fatalf("Reload removing L while l-0 waits for room: %v, want ErrRefused naming L", err)
	}
	reloaded := make(chan error, 1)
	go func() { reloaded <- rt.Reload(t.Context(), short(kd)) }()
	in := rt.cur.Load().receiver("edge").in
	waitFor(t, 20*time.Second, "the reload to hold the listener or to switch its routes", func() bool {
		in.mu.RLock()
		defer in.mu.RUnlock()
		return in.held != nil || !takes(rt, "L")
	})
	kSink.down.Store(false) // room: L commits l-0
	if err := <-reloaded; !errors.Is(err, ErrRefused) {
		waitFor(t, 20*time.Second, "l-0 in the outbox", func() bool { return sessionStats(t, rt, "s").Routes["L"] != stores.RouteCounts{} })
		t.Fatalf("Reload removing L while it took l-0 in: %v, want ErrRefused; session s holds %+v", err, sessionStats(t, rt, "s").Routes)
	}
	noDeadLetters(t, rt)
}
