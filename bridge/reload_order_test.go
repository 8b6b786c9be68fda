package bridge

import (
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
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
