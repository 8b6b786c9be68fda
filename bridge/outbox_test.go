package bridge

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/gobridge/gobridge/stores"
)

func TestOutbox_BackpressureBoundsDepthAndHoldsPublishers(t *testing.T) {
	t.Parallel()
	s := newSink(t)
	s.down.Store(true)
	addr := freeAddr(t)
	cfg := parseConfig(t, listenerConfig(addr, "", "{type: memory}",
		fmt.Sprintf(`  - {id: sink, type: http, options: {url: %q}}`, s.srv.URL), `
  - id: buffered
    receiver: edge
    topic: "#"
    sender: sink
    delivery_mode: shared_outbox
    session: {id: s1, drain_strategy: {type: fixed_poll, interval: 100ms}}
    policy:
      max_outbox_depth: 100
      backoff: {initial_interval: 100ms, max_interval: 300ms}`))
	rt := startBridge(t, cfg)

	const pubs, per = 5, 60 // 300 messages, three times the depth
	var all []paho.Token
	var wg sync.WaitGroup
	var mu sync.Mutex
	for p := range pubs {
		c := publisher(t, "tcp://"+addr, fmt.Sprintf("bp-%d", p))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range per {
				tok := c.Publish("line/x", 1, false, msgID(p*per+i))
				mu.Lock()
				all = append(all, tok)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()

	// Sample for at least 3s, and on past that (up to a deadline) until the
	// outbox is full and exactly its depth is acknowledged: on a loaded
	// 2-core CI machine under -race, 300 publishes can take longer than 3s
	// to reach the bound.
	maxPending, acked := 0, 0
	minEnd, deadline := time.Now().Add(3*time.Second), time.Now().Add(30*time.Second)
	for now := time.Now(); now.Before(minEnd) || (now.Before(deadline) && (maxPending != 100 || acked != 100)); now = time.Now() {
		st := sessionStats(t, rt, "s1")
		maxPending = max(maxPending, st.Live)
		acked = 0
		for _, tok := range all {
			if tokenDone(tok) {
				acked++
			}
		}
		if st.Live > 100 {
			t.Fatalf("live %d exceeds max_outbox_depth 100", st.Live)
		}
		if acked > 100 {
			t.Fatalf("%d messages acknowledged with the sink down and max_outbox_depth 100", acked)
		}
		time.Sleep(10 * time.Millisecond) // sampling interval
	}
	if maxPending != 100 || acked != 100 {
		t.Fatalf("with the sink down: max pending %d, acknowledged %d; want both 100", maxPending, acked)
	}
	s.down.Store(false)
	waitTokens(t, all, 30*time.Second)
	waitFor(t, 30*time.Second, "every message delivered", func() bool { return s.distinct() == pubs*per })
}

// flakyOutbox fails every Write while failing is set.
type flakyOutbox struct {
	stores.Store
	failing  atomic.Bool
	failures atomic.Int64
}

func (f *flakyOutbox) Write(ctx context.Context, b *stores.Batch) error {
	if f.failing.Load() {
		f.failures.Add(1)
		return errTest
	}
	return f.Store.Write(ctx, b)
}

func TestOutbox_AppendFailuresAreRetriedAndNothingIsAckedBeforeItIsDurable(t *testing.T) {
	t.Parallel()
	s := newSink(t)
	addr := freeAddr(t)
	cfg := parseConfig(t, listenerConfig(addr, "", "{type: memory}",
		fmt.Sprintf(`  - {id: sink, type: http, options: {url: %q}}`, s.srv.URL), `
  - {id: r, receiver: edge, topic: "#", sender: sink, delivery_mode: shared_outbox, session: {id: s1}}`))
	rt, err := New(cfg, Options{Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	flaky := &flakyOutbox{Store: rt.store}
	flaky.failing.Store(true)
	rt.writer.store = flaky
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- rt.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-errc; err != nil {
			t.Errorf("Run: %v", err)
		}
	})

	pub := publisher(t, "tcp://"+addr, "flaky")
	tok := pub.Publish("line/x", 1, false, "m")
	waitFor(t, 10*time.Second, "a few failed appends", func() bool { return flaky.failures.Load() >= 3 })
	if tokenDone(tok) {
		t.Fatal("message acknowledged although no append succeeded")
	}
	flaky.failing.Store(false)
	waitTokens(t, []paho.Token{tok}, 10*time.Second)
	waitFor(t, 10*time.Second, "delivery after the store recovered", func() bool { return s.distinct() == 1 })
}

// A session's limits are the smallest max_outbox_depth among its routes
// (README "Monitoring": gobridge_outbox_pending_limit), whatever the order
// of the routes in the config.
func TestOutbox_TheSessionTakesItsRoutesSmallestDepth(t *testing.T) {
	t.Parallel()
	s := newSink(t)
	s.down.Store(true)
	addr := freeAddr(t)
	cfg := parseConfig(t, listenerConfig(addr, "", "{type: memory}",
		fmt.Sprintf(`  - {id: sink, type: http, options: {url: %q}}`, s.srv.URL), `
  - {id: roomy, receiver: edge, topic: "a/#", sender: sink, delivery_mode: shared_outbox, session: {id: s1}}
  - {id: tight, receiver: edge, topic: "b/#", sender: sink, delivery_mode: shared_outbox, session: {id: s1},
     policy: {max_outbox_depth: 3}}`))
	rt := startBridge(t, cfg)
	pub := publisher(t, "tcp://"+addr, "smallest-depth")
	var toks []paho.Token
	for i := range 6 {
		toks = append(toks, pub.Publish("b/1", 1, false, msgID(i)))
	}
	acked := func() int {
		n := 0
		for _, tok := range toks {
			if tokenDone(tok) {
				n++
			}
		}
		return n
	}
	full := func() bool { sessions, _ := rt.limits.full(); return len(sessions) == 1 }
	waitFor(t, 20*time.Second, "ingest to push back, or every message acknowledged", func() bool {
		return full() || acked() == len(toks)
	})
	waitFor(t, 10*time.Second, "the records admitted to be acknowledged", func() bool { return acked() >= 3 })
	if n, live := acked(), sessionStats(t, rt, "s1").Live; n != 3 || live != 3 {
		t.Fatalf("with the sink down: %d acknowledged, %d live; want 3 and 3 (the tight route's max_outbox_depth)", n, live)
	}
}

// gobridge_outbox_backpressure_seconds_total rises while ingest waits at
// max_outbox_depth, not only once the wait ends: the README's
// GobridgeOutboxFull alert watches it rise while a dead target keeps the
// session full, and then no wait ends.
func TestOutbox_BackpressureIsCountedWhileIngestWaits(t *testing.T) {
	t.Parallel()
	s := newSink(t)
	s.down.Store(true)
	addr := freeAddr(t)
	cfg := parseConfig(t, listenerConfig(addr, "", "{type: memory}",
		fmt.Sprintf(`  - {id: sink, type: http, options: {url: %q}}`, s.srv.URL), `
  - {id: r, receiver: edge, topic: "#", sender: sink, delivery_mode: shared_outbox, session: {id: s1},
     policy: {max_outbox_depth: 1}}`))
	rt := startBridge(t, cfg)
	pub := publisher(t, "tcp://"+addr, "backpressure-counted")
	first := pub.Publish("a/1", 1, false, msgID(0))
	waitTokens(t, []paho.Token{first}, 10*time.Second)
	second := pub.Publish("a/1", 1, false, msgID(1))
	blocked := rt.metrics.backpressure.WithLabelValues("s1")
	waitFor(t, 20*time.Second, "backpressure seconds while the second message waits", func() bool { return counted(blocked) > 0 })
	if tokenDone(second) {
		t.Fatal("the second message was acknowledged with the session at max_outbox_depth 1 and the sink down")
	}
}
