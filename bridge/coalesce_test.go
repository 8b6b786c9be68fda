package bridge

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/gobridge/gobridge/routes"
)

// Coalescing keeps the newest message of a key among the records waiting
// in the outbox or held by the drainer (README, processors). On a route
// with several partitions and no ordering key the records of one coalesce
// key must meet in one partition: placed by their envelope IDs, each
// partition held its own newest heartbeat, so a target that came back got
// one per partition, in any order (it could end on an old value).
func TestBridge_CoalescedRecordsMeetInOnePartition(t *testing.T) {
	t.Parallel()
	s := newSink(t)
	var refused atomic.Int64
	down := atomic.Bool{}
	down.Store(true)
	s.fail = func(string) bool { refused.Add(1); return down.Load() }
	addr := freeAddr(t)
	b := startBridge(t, heartbeatConfig(t, addr, s.srv.URL, "{id: s, partitions: 8}", "1s"))
	pub := publisher(t, "tcp://"+addr, "hb")
	body := func(n int) string { return fmt.Sprintf(`{"n":%d}`, n) }
	const beats = 40
	// The first one is held by its partition's drainer, refused once; the
	// others follow, appended claimed for their partitions' drainers.
	waitTokens(t, []paho.Token{pub.Publish("hb/dev-1", 1, false, body(0))}, 30*time.Second)
	waitFor(t, 30*time.Second, "the first heartbeat refused", func() bool { return refused.Load() > 0 })
	var toks []paho.Token
	for n := 1; n < beats; n++ {
		toks = append(toks, pub.Publish("hb/dev-1", 1, false, body(n)))
	}
	waitTokens(t, toks, 30*time.Second)
	live := func() int { return sessionStats(t, b, "s").Live }
	t.Logf("live after publish: %d", live())
	waitFor(t, 30*time.Second, "the heartbeats to coalesce", func() bool { return live() <= 2 })
	down.Store(false)
	waitFor(t, 30*time.Second, "the outbox to drain", func() bool { return live() == 0 })
	s.mu.Lock()
	got := append([]string(nil), s.order...)
	s.mu.Unlock()
	// The newest, and at most one older heartbeat that was being sent when
	// a newer one arrived (a record being sent is not replaced).
	if len(got) == 0 || len(got) > 2 || s.count(body(beats-1)) != 1 {
		t.Errorf("deliveries of %d heartbeats of one coalesce key: %q; want the newest, %s, and at most one other", beats, got, body(beats-1))
	}
}

// A record being sent is not replaced, but the newer message of its
// coalesce key that arrived meanwhile must not overtake it: it waits for
// that send, and when the send fails it replaces the record (due at the
// record's next attempt). It went out at once, and the older record, sent
// again after its backoff, was delivered after it: the target ended on the
// older value.
func TestBridge_ANewerRecordWaitsForTheSendOfTheOneItReplaces(t *testing.T) {
	t.Parallel()
	sending, release := make(chan struct{}), make(chan struct{})
	var first atomic.Bool
	var mu sync.Mutex
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if string(b) == "hb-0" && first.CompareAndSwap(false, true) {
			close(sending)
			<-release
			http.Error(w, "busy", http.StatusServiceUnavailable)
			return
		}
		mu.Lock()
		got = append(got, string(b))
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	unblock := sync.OnceFunc(func() { close(release) })
	t.Cleanup(unblock)
	addr := freeAddr(t)
	b := startBridge(t, heartbeatConfig(t, addr, srv.URL, "{id: s}", "100ms"))
	pub := publisher(t, "tcp://"+addr, "hb")
	waitTokens(t, []paho.Token{pub.Publish("hb/dev-1", 1, false, "hb-0")}, 30*time.Second)
	<-sending
	waitTokens(t, []paho.Token{pub.Publish("hb/dev-1", 1, false, "hb-1")}, 30*time.Second)
	time.Sleep(200 * time.Millisecond) // lets a drainer that would send hb-1 now do so (not synchronisation)
	unblock()
	waitFor(t, 30*time.Second, "the outbox to drain", func() bool { return sessionStats(t, b, "s").Live == 0 })
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(got, []string{"hb-1"}) {
		t.Errorf("deliveries %q; want only the newer heartbeat, hb-1 (hb-0 failed while hb-1 waited)", got)
	}
}

// heartbeatConfig is a bridge with an embedded listener on addr and a
// SQLite outbox, whose route coalesces "hb/#" by topic into session (YAML)
// towards target, retrying every backoff.
func heartbeatConfig(t *testing.T, addr, target, session, backoff string) *routes.Config {
	t.Helper()
	db := filepath.Join(t.TempDir(), "outbox.db")
	return parseConfig(t, listenerConfig(addr, "", fmt.Sprintf("{type: sqlite, options: {path: %q}}", db),
		fmt.Sprintf(`  - {id: sink, type: http, options: {url: %q}}`, target), fmt.Sprintf(`
  - id: hb
    receiver: edge
    topic: "hb/#"
    sender: sink
    delivery_mode: shared_outbox
    processors: [{type: coalesce, key: "{topic}"}]
    session: %s
    policy: {backoff: {initial_interval: %s, max_interval: %[2]s}}`, session, backoff)))
}
