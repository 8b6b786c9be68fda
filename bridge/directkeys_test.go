package bridge

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// queued is how many messages of key wait behind the one in delivery.
func (l *lanes) queued(key string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.keys[key])
}

// TestDirectHold_AFailingKeyDoesNotTakeEverySlot: a direct_hold route with
// max_in_flight 2 fed by http_listener requests (independent: no in-order
// acknowledgement). The target keeps refusing one key's messages; the one
// being retried holds a slot, and the messages queued behind it must not
// hold the other: another key's message is delivered and answered 200
// (it waited for a slot until settle_timeout and got 503).
func TestDirectHold_AFailingKeyDoesNotTakeEverySlot(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	got := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got[string(b)]++
		mu.Unlock()
		if strings.HasPrefix(string(b), "bad") {
			http.Error(w, "busy", http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	seen := func(body string) int { mu.Lock(); defer mu.Unlock(); return got[body] }

	b, base := startDirectHoldIngest(t, srv.URL, ", settle_timeout: 5s", ", max_in_flight: 2")

	// The failing key's messages, each in its own request: the first is
	// retried, the others queue behind it. Their requests end with the test
	// (they get 503 at settle_timeout).
	for i := range 3 {
		go publishHTTP(http.DefaultClient, base, "plant/bad", "", fmt.Sprintf("bad%d", i))
		if i == 0 {
			waitFor(t, 10*time.Second, "bad0 retried", func() bool { return seen("bad0") >= 2 })
		}
	}
	lanes := &b.cur.Load().route("r").hold.lanes
	waitFor(t, 10*time.Second, "two messages queued behind bad0", func() bool { return lanes.queued("plant/bad") >= 2 })
	if a := mustPublish(t, base, "plant/good", "", "good"); a.status != http.StatusOK {
		t.Fatalf("a message of another key: %+v, want 200 (delivered)", a)
	}
	if n := seen("good"); n != 1 {
		t.Fatalf("the target got the other key's message %d times", n)
	}
}

// TestLanes_AHeadThatGivesUpHandsItsKeyOn: the first message of key b
// waits for the only slot (held by key a) and gives up (its ctx ends);
// the message of b that queued behind it meanwhile was accepted, so it
// must still be sent once the slot frees, and the route's counts must
// balance at quit.
func TestLanes_AHeadThatGivesUpHandsItsKeyOn(t *testing.T) {
	t.Parallel()
	r := &route{quit: make(chan struct{})}
	r.policy.MaxInFlight = 1
	l := newLanes(r, nil)
	hold, ran := make(chan struct{}), make(chan string, 3)
	if !l.start(t.Context(), r, "a", func() { <-hold; ran <- "a" }) {
		t.Fatal("a not taken")
	}
	ctx, cancel := context.WithCancel(t.Context())
	gaveUp := make(chan bool)
	go func() { gaveUp <- l.start(ctx, r, "b", func() { ran <- "b1" }) }()
	waitFor(t, 10*time.Second, "b1 waiting for a slot", func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		_, inDelivery := l.keys["b"]
		return inDelivery
	})
	if !l.start(t.Context(), r, "b", func() { ran <- "b2" }) {
		t.Fatal("b2 not taken")
	}
	cancel()
	if <-gaveUp {
		t.Fatal("b1 was taken though its ctx ended while it waited for a slot")
	}
	close(hold)
	for _, want := range []string{"a", "b2"} {
		select {
		case got := <-ran:
			if got != want {
				t.Fatalf("ran %s, want %s", got, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s did not run", want)
		}
	}
	r.stop()
	r.busy.Wait() // every accepted message counted once and released once
	r.workers.Wait()
	if len(l.keys) != 0 || l.sends.Load() != 0 {
		t.Fatalf("left behind: keys %v, in flight %d", l.keys, l.sends.Load())
	}
}

// TestDirectHold_AnAnsweredRequestLeavesNothingQueued: a direct_hold route
// keyed by topic, fed by http_listener, whose target is down. Each request
// behind the key's retried message is answered 503 at settle_timeout (its
// window bytes and slot given back), and its producer retries: a message
// still queued behind the key after its request ended kept its payload for
// as long as the target was down, one more per retry (RAM without bound,
// DESIGN.md §1.3). Once its request is answered, nothing of it may remain.
func TestDirectHold_AnAnsweredRequestLeavesNothingQueued(t *testing.T) {
	t.Parallel()
	var sent sync.Map
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		sent.Store(string(b), true)
		http.Error(w, "down", http.StatusServiceUnavailable)
	}))
	t.Cleanup(srv.Close)
	b, base := startDirectHoldIngest(t, srv.URL, ", settle_timeout: 1s", "")

	go publishHTTP(http.DefaultClient, base, "plant/k", "", "head")
	waitFor(t, 10*time.Second, "the head retried", func() bool { _, ok := sent.Load("head"); return ok })
	var wg sync.WaitGroup
	for i := range 5 {
		wg.Go(func() {
			a, err := publishHTTP(http.DefaultClient, base, "plant/k", "", fmt.Sprintf("retry%d", i))
			if err != nil || a.status != http.StatusServiceUnavailable {
				t.Errorf("a message behind the held key: %+v, %v; want 503", a, err)
			}
		})
	}
	wg.Wait()
	lanes := &b.cur.Load().route("r").hold.lanes
	waitFor(t, 10*time.Second, "the answered messages to leave the key's queue", func() bool { return lanes.queued("plant/k") == 0 })
}

// startDirectHoldIngest runs a bridge whose http_listener (with
// receiverOpts) feeds a keyed direct_hold route (with policy) to target,
// and returns it with the listener's base URL once it answers.
func startDirectHoldIngest(t *testing.T, target, receiverOpts, policy string) (*Bridge, string) {
	t.Helper()
	addr := freeAddr(t)
	cfg := httpIngestConfig(t, addr, target, receiverOpts, policy)
	cfg = strings.Replace(cfg, "delivery_mode: shared_outbox", "delivery_mode: direct_hold", 1)
	cfg = strings.Replace(cfg, "    session: {id: s, drain_strategy: {type: fixed_poll, interval: 50ms}}\n", "", 1)
	b := startBridge(t, parseConfig(t, cfg))
	base := "http://" + addr
	waitFor(t, 10*time.Second, "the http listener", func() bool { _, err := http.Get(base + "/"); return err == nil })
	return b, base
}
