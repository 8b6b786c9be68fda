package bridge

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
)

// A key whose records have drained from the outbox goes direct again
// although the session's outbox never empties (one record keeps failing):
// the route does not remember every ordering key it ever sent to the
// outbox.
func TestFallback_AKeyGoesDirectAgainOnceItsRecordsDrained(t *testing.T) {
	t.Parallel()
	s := newSink(t)
	var stuck, firstFails atomic.Bool
	stuck.Store(true)
	firstFails.Store(true)
	var seen sync.Map
	s.fail = func(body string) bool {
		if strings.Contains(body, "stuck") {
			return stuck.Load()
		}
		_, again := seen.LoadOrStore(body, true)
		return !again && firstFails.Load()
	}
	// The stuck record is never poisoned: the outbox stays non-empty.
	b, addr, reg := fallbackBridge(t, s, "20s", "max_replay_attempts: 0, replay_budget: 1h, ")
	pub := publisher(t, "tcp://"+addr, "fb-forget")
	publish := func(topic, id string) paho.Token {
		return pub.Publish(topic, 1, false, fmt.Sprintf(`{"id": %q}`, id))
	}
	waitTokens(t, []paho.Token{publish("line/stuck", "stuck")}, 20*time.Second)

	const keys = 50
	var toks []paho.Token
	for i := range keys { // each fails its direct attempt: to the outbox
		toks = append(toks, publish(fmt.Sprintf("line/%d", i), msgID(i)))
	}
	waitTokens(t, toks, 20*time.Second)
	waitFor(t, 30*time.Second, "the keys' records delivered by the drainer", func() bool { return s.distinct() == keys })
	waitFor(t, 10*time.Second, "only the stuck record left", func() bool { return b.limits.live("s1") == 1 })
	if got := counter(t, reg, "gobridge_delivery_fallback_total", "hybrid"); got < keys+1 {
		t.Fatalf("fallback %v, want every message through the outbox", got)
	}

	firstFails.Store(false)
	direct := counter(t, reg, "gobridge_delivery_direct_total", "hybrid")
	toks = nil
	for i := range keys {
		toks = append(toks, publish(fmt.Sprintf("line/%d", i), msgID(keys+i)))
	}
	waitTokens(t, toks, 20*time.Second)
	waitFor(t, 10*time.Second, "the new messages at the target", func() bool { return s.distinct() == 2*keys })
	if got := counter(t, reg, "gobridge_delivery_direct_total", "hybrid") - direct; got != keys {
		t.Errorf("%v of %d messages of drained keys went direct, want all", got, keys)
	}
	f := b.cur.Load().route("hybrid").fallback
	f.mu.Lock()
	held := len(f.sticky)
	f.mu.Unlock()
	if held > 1 {
		t.Errorf("the route remembers %d ordering keys, want only the stuck one's", held)
	}

	stuck.Store(false)
	waitFor(t, 30*time.Second, "the stuck record delivered", func() bool { return s.count(`{"id": "stuck"}`) == 1 })
	waitFor(t, 10*time.Second, "the outbox empty", func() bool { return sessionStats(t, b, "s1").Live == 0 })
}

// Per-key order holds while keys move between the direct path and the
// outbox and are forgotten as their records drain, with a target that
// refuses every third request and a session outbox that never empties.
func TestFallback_KeyOrderHoldsWhileKeysComeAndGo(t *testing.T) {
	t.Parallel()
	s := newSink(t)
	var stuck atomic.Bool
	stuck.Store(true)
	var requests atomic.Int64
	s.fail = func(body string) bool {
		if strings.Contains(body, "stuck") {
			return stuck.Load()
		}
		return requests.Add(1)%3 == 0
	}
	b, addr, reg := fallbackBridge(t, s, "20s", "max_replay_attempts: 0, replay_budget: 1h, ")
	pub := publisher(t, "tcp://"+addr, "fb-comego")
	toks := []paho.Token{pub.Publish("line/stuck", 1, false, `{"id": "stuck"}`)}
	const n = 400
	for i := range n {
		toks = append(toks, pub.Publish(fmt.Sprintf("line/%d", i%4), 1, false, fmt.Sprintf(`{"id": %q}`, msgID(i))))
	}
	waitTokens(t, toks, 30*time.Second)
	waitFor(t, 60*time.Second, "every message at the target", func() bool { return s.distinct() == n })
	s.mu.Lock()
	order := append([]string(nil), s.order...)
	s.mu.Unlock()
	checkBodyOrder(t, order, 4)
	if fb, d := counter(t, reg, "gobridge_delivery_fallback_total", "hybrid"), counter(t, reg, "gobridge_delivery_direct_total", "hybrid"); fb == 0 || d == 0 {
		t.Errorf("fallback %v, direct %v: want both paths taken", fb, d)
	}
	stuck.Store(false)
	waitFor(t, 30*time.Second, "the outbox empty", func() bool { return sessionStats(t, b, "s1").Live == 0 })
}

// checkBodyOrder fails t when a body {"id": "m-N"} of key N%keys reached
// the target after a later message of its key.
func checkBodyOrder(t *testing.T, order []string, keys int) {
	t.Helper()
	last := map[int]int{}
	for _, body := range order {
		var i int
		if _, err := fmt.Sscanf(strings.TrimPrefix(body, `{"id": "m-`), "%d", &i); err != nil {
			continue // not a numbered message
		}
		if prev, ok := last[i%keys]; ok && i < prev {
			t.Errorf("key %d: message %d delivered after %d", i%keys, i, prev)
		}
		last[i%keys] = max(last[i%keys], i)
	}
}
