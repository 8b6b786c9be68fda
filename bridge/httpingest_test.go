package bridge

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gobridge/gobridge/receivers/httplistener"
)

// keyTarget is an HTTP target recording, per body, the Idempotency-Key
// (the envelope ID) of each delivery. It can be switched down (503).
type keyTarget struct {
	srv  *httptest.Server
	down atomic.Bool
	mu   sync.Mutex
	ids  map[string][]string // body -> envelope IDs delivered
}

func newKeyTarget(t testing.TB) *keyTarget {
	k := &keyTarget{ids: map[string][]string{}}
	k.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if k.down.Load() {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		k.mu.Lock()
		k.ids[string(b)] = append(k.ids[string(b)], r.Header.Get("Idempotency-Key"))
		k.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(k.srv.Close)
	return k
}

func (k *keyTarget) delivered(body string) []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]string(nil), k.ids[body]...)
}

func (k *keyTarget) distinct() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.ids)
}

// httpIngestConfig is a bridge with an anonymous http_listener on addr
// (topics plant/#) feeding a shared_outbox route on SQLite to target.
func httpIngestConfig(t testing.TB, addr, target, receiverOpts, policy string) string {
	return fmt.Sprintf(`version: 1
bridge: {id: web, admin: {listen: ""}, shutdown_timeout: 5s}
stores:
  outbox: {type: sqlite, options: {path: %q}}
receivers:
  - id: web
    type: http_listener
    options: {listen: %q, allow_anonymous: true%s}
    topics: [{topic: "plant/#"}]
senders:
  - {id: target, type: http, options: {url: %q, timeout: 2s}}
routes:
  - id: r
    receiver: web
    topic: "plant/#"
    sender: target
    delivery_mode: shared_outbox
    ordering_key: "{topic}"
    session: {id: s, drain_strategy: {type: fixed_poll, interval: 50ms}}
    policy: {backoff: {initial_interval: 50ms, max_interval: 200ms}%s}
`, filepath.Join(t.TempDir(), "outbox.db"), addr, receiverOpts, target, policy)
}

type ingestAnswer struct {
	status     int
	retryAfter string
	ID         string `json:"id"`
	Outcome    string `json:"outcome"`
	Error      string `json:"error"`
}

// publishHTTP posts body to topic; key "" sends no Idempotency-Key.
func publishHTTP(client *http.Client, base, topic, key, body string) (ingestAnswer, error) {
	req, err := http.NewRequest(http.MethodPost, base+"/v1/publish/"+topic, strings.NewReader(body))
	if err != nil {
		return ingestAnswer{}, err
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := client.Do(req)
	if err != nil {
		return ingestAnswer{}, err
	}
	defer resp.Body.Close()
	var a ingestAnswer
	if err := json.NewDecoder(resp.Body).Decode(&a); err != nil {
		return ingestAnswer{}, fmt.Errorf("answer %d: %w", resp.StatusCode, err)
	}
	a.status, a.retryAfter = resp.StatusCode, resp.Header.Get("Retry-After")
	return a, nil
}

func mustPublish(t *testing.T, base, topic, key, body string) ingestAnswer {
	t.Helper()
	a, err := publishHTTP(http.DefaultClient, base, topic, key, body)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// TestHTTPIngest_ConcurrentProducersGetTheDeliveredID: every 200 answer is
// followed by a delivery, and the id it names is the envelope ID the
// target receives (the http sender's Idempotency-Key), with and without a
// producer's Idempotency-Key.
func TestHTTPIngest_ConcurrentProducersGetTheDeliveredID(t *testing.T) {
	t.Parallel()
	target := newKeyTarget(t)
	addr := freeAddr(t)
	startBridge(t, parseConfig(t, httpIngestConfig(t, addr, target.srv.URL, "", "")))
	base := "http://" + addr
	waitFor(t, 10*time.Second, "the http listener", func() bool { _, err := http.Get(base + "/"); return err == nil })

	const producers, per = 8, 50
	answers := make([][]ingestAnswer, producers)
	var wg sync.WaitGroup
	for p := range producers {
		wg.Go(func() {
			for i := range per {
				key := ""
				if i%2 == 0 {
					key = fmt.Sprintf("k-%d-%d", p, i)
				}
				a, err := publishHTTP(http.DefaultClient, base, fmt.Sprintf("plant/line-%d", p), key, fmt.Sprintf("m-%d-%d", p, i))
				if err != nil {
					t.Error(err)
					return
				}
				answers[p] = append(answers[p], a)
			}
		})
	}
	wg.Wait()
	waitFor(t, 30*time.Second, "every answered message delivered", func() bool { return target.distinct() == producers*per })
	for p, as := range answers {
		if len(as) != per {
			t.Fatalf("producer %d: %d answers", p, len(as))
		}
		for i, a := range as {
			if a.status != http.StatusOK || a.Outcome != "committed" {
				t.Fatalf("producer %d message %d: %+v", p, i, a)
			}
			if i%2 == 0 {
				if want := httplistener.EnvelopeID("web", fmt.Sprintf("plant/line-%d", p), fmt.Sprintf("k-%d-%d", p, i)); a.ID != want {
					t.Fatalf("producer %d message %d: id %s, want %s", p, i, a.ID, want)
				}
			}
			if got := target.delivered(fmt.Sprintf("m-%d-%d", p, i)); len(got) != 1 || got[0] != a.ID {
				t.Fatalf("producer %d message %d answered id %s, delivered as %v", p, i, a.ID, got)
			}
		}
	}
}

// TestHTTPIngest_RetryWithTheSameKeyReachesTheTargetOnce: retries of a POST
// (while its record is pending, and after it was delivered) are absorbed by
// the outbox and answered 200 with the same id.
func TestHTTPIngest_RetryWithTheSameKeyReachesTheTargetOnce(t *testing.T) {
	t.Parallel()
	target := newKeyTarget(t)
	target.down.Store(true)
	addr := freeAddr(t)
	startBridge(t, parseConfig(t, httpIngestConfig(t, addr, target.srv.URL, "", "")))
	base := "http://" + addr
	waitFor(t, 10*time.Second, "the http listener", func() bool { _, err := http.Get(base + "/"); return err == nil })

	first := mustPublish(t, base, "plant/a", "order-1", "once")
	again := mustPublish(t, base, "plant/a", "order-1", "once")
	if first.status != 200 || again.status != 200 || again.ID != first.ID {
		t.Fatalf("answers %+v, %+v", first, again)
	}
	target.down.Store(false)
	waitFor(t, 10*time.Second, "the delivery", func() bool { return len(target.delivered("once")) > 0 })
	if late := mustPublish(t, base, "plant/a", "order-1", "once"); late.status != 200 || late.ID != first.ID {
		t.Fatalf("retry after delivery: %+v", late)
	}
	// The route keeps order per topic: once the next message on the topic
	// arrives, a duplicate of the retried one would have arrived before it.
	mustPublish(t, base, "plant/a", "order-2", "next")
	waitFor(t, 10*time.Second, "the next message", func() bool { return len(target.delivered("next")) == 1 })
	if got := target.delivered("once"); len(got) != 1 || got[0] != first.ID {
		t.Fatalf("delivered %v, want once with id %s", got, first.ID)
	}
}

// TestHTTPIngest_FullOutboxAnswers503UntilTheTargetIsBack: with the
// target down and max_outbox_depth reached, a POST waits settle_timeout
// and gets 503 with Retry-After; once the target is back it gets 200.
func TestHTTPIngest_FullOutboxAnswers503UntilTheTargetIsBack(t *testing.T) {
	t.Parallel()
	target := newKeyTarget(t)
	target.down.Store(true)
	addr := freeAddr(t)
	b := startBridge(t, parseConfig(t, httpIngestConfig(t, addr, target.srv.URL, ", settle_timeout: 300ms", ", max_outbox_depth: 3")))
	base := "http://" + addr
	waitFor(t, 10*time.Second, "the http listener", func() bool { _, err := http.Get(base + "/"); return err == nil })

	// settle_timeout is short so that the POST on the full outbox is
	// answered soon, but a loaded machine can take longer than that to
	// commit a message: the producer then does what the 503 tells it,
	// repeats the POST with the same Idempotency-Key, until the record is
	// stored (a commit that outlasted the 503 also counts, as a repeat
	// would wait for room once the outbox holds all three).
	for i := range 3 {
		key, body := fmt.Sprintf("k%d", i), fmt.Sprintf("m%d", i)
		waitFor(t, 10*time.Second, "message "+key+" stored", func() bool {
			if sessionStats(t, b, "s").Live == i+1 {
				return true
			}
			a := mustPublish(t, base, "plant/a", key, body)
			if a.status != 200 && a.status != http.StatusServiceUnavailable {
				t.Fatalf("message %d: %+v", i, a)
			}
			return a.status == 200
		})
	}
	full := mustPublish(t, base, "plant/a", "k3", "m3")
	if full.status != http.StatusServiceUnavailable || full.retryAfter == "" {
		t.Fatalf("with the outbox full: %+v", full)
	}
	if live := sessionStats(t, b, "s").Live; live != 3 {
		t.Fatalf("live %d, want 3", live)
	}
	target.down.Store(false)
	waitFor(t, 10*time.Second, "the backlog delivered", func() bool { return target.distinct() == 3 })
	// The outbox has room again: the same POST is committed, under the id
	// its 503 named (repeated, like above, if a commit outlasts
	// settle_timeout).
	waitFor(t, 10*time.Second, "a 200 for the refused message", func() bool {
		a := mustPublish(t, base, "plant/a", "k3", "m3")
		if a.ID != full.ID || (a.status != 200 && a.status != http.StatusServiceUnavailable) {
			t.Fatalf("after the target came back: %+v (503 named id %s)", a, full.ID)
		}
		return a.status == 200
	})
	waitFor(t, 10*time.Second, "the retried message delivered", func() bool { return len(target.delivered("m3")) == 1 })
}

// TestHTTPIngest_AnswersTheIDTheRouteGaveIt: with an idempotency_key
// processor on the route, the answer's id is the envelope ID the record
// got (and the target receives), not the one the message arrived with
// (it named a fresh UUIDv7 that no record or delivery carries).
func TestHTTPIngest_AnswersTheIDTheRouteGaveIt(t *testing.T) {
	t.Parallel()
	target := newKeyTarget(t)
	addr := freeAddr(t)
	cfg := strings.Replace(httpIngestConfig(t, addr, target.srv.URL, "", ""), "    delivery_mode: shared_outbox\n",
		"    delivery_mode: shared_outbox\n    processors: [{type: idempotency_key, from: \"order-{header.X-Order}\"}]\n", 1)
	cfg = strings.Replace(cfg, "allow_anonymous: true", "allow_anonymous: true, headers: [X-Order]", 1)
	startBridge(t, parseConfig(t, cfg))
	base := "http://" + addr
	waitFor(t, 10*time.Second, "the http listener", func() bool { _, err := http.Get(base + "/"); return err == nil })

	req, _ := http.NewRequest(http.MethodPost, base+"/v1/publish/plant/a", strings.NewReader("body-7"))
	req.Header.Set("X-Order", "7")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var a ingestAnswer
	err = json.NewDecoder(resp.Body).Decode(&a)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 || a.ID != "order-7" {
		t.Fatalf("answer %d %+v (%v), want id order-7", resp.StatusCode, a, err)
	}
	waitFor(t, 10*time.Second, "the delivery", func() bool { return len(target.delivered("body-7")) == 1 })
	if got := target.delivered("body-7"); got[0] != a.ID {
		t.Fatalf("answered id %s, delivered as %s", a.ID, got[0])
	}
}

// A record the store refuses is kept as its truncated dead letter (the
// writer isolates it); the producer's answer must say so. It said
// "committed", as for a record the drainer will deliver.
func TestHTTPIngest_ARecordTheStoreRefusesIsAnsweredDeadLettered(t *testing.T) {
	t.Parallel()
	target := newKeyTarget(t)
	addr := freeAddr(t)
	yml := httpIngestConfig(t, addr, target.srv.URL, "", "")
	_, rest, _ := strings.Cut(yml, `path: "`)
	db, _, _ := strings.Cut(rest, `"`)
	startBridge(t, parseConfig(t, yml))
	base := "http://" + addr
	waitFor(t, 10*time.Second, "the http listener", func() bool { _, err := http.Get(base + "/"); return err == nil })
	// SQLITE_TOOBIG for a live record carrying the marker: stores.ErrInvalid.
	sqliteTrigger(t, db, `CREATE TRIGGER refuse BEFORE INSERT ON outbox WHEN NEW.state = 0 AND
		instr(CAST(NEW.payload AS TEXT), 'refuse-me') > 0 BEGIN SELECT zeroblob(2000000000); END`)
	if a := mustPublish(t, base, "plant/1", "", "fine"); a.status != http.StatusOK || a.Outcome != "committed" {
		t.Fatalf("a record the store takes: %+v", a)
	}
	a := mustPublish(t, base, "plant/1", "", "refuse-me")
	if a.status != http.StatusOK || a.Outcome != "dead_lettered" {
		t.Errorf("a record the store refused, kept as a truncated dead letter: answered %+v; want 200, dead_lettered", a)
	}
	waitFor(t, 30*time.Second, "the other record delivered", func() bool { return target.distinct() == 1 })
	if got := target.delivered("refuse-me"); len(got) != 0 {
		t.Errorf("the refused record was delivered: %v", got)
	}
}
