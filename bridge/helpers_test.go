package bridge

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/gobridge/gobridge/internal/testservices"
	"github.com/gobridge/gobridge/routes"
	"github.com/gobridge/gobridge/stores"
)

// testLogger routes logs to t.Log (warn and above unless -v style debugging
// is wanted).
func testLogger(t testing.TB) *slog.Logger {
	w := &tWriter{t: t}
	t.Cleanup(func() { w.done.Store(true) })
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// tWriter writes to t.Log until the test's cleanup ran (goroutines of a
// stopped broker may still log).
type tWriter struct {
	t    testing.TB
	done atomic.Bool
}

func (w *tWriter) Write(p []byte) (int, error) {
	if !w.done.Load() {
		w.t.Log(strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}

// freeAddr returns a loopback address that was free a moment ago (see
// testservices.FreeAddr).
func freeAddr(t testing.TB) string {
	t.Helper()
	return testservices.FreeAddr(t)
}

// parseConfig loads a YAML config through the real loader (defaults and
// validation) and fails the test on any error.
func parseConfig(t testing.TB, yml string) *routes.Config {
	t.Helper()
	cfg, probs, err := routes.ParseWithEnv(strings.NewReader(yml), "test.yaml", func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	if probs.HasErrors() {
		t.Fatalf("config has errors:\n%v\n%s", probs.Errors(), yml)
	}
	return cfg
}

// startBridge builds and runs a bridge; the cleanup stops it and checks
// that Run returned nil.
func startBridge(t testing.TB, cfg *routes.Config) *Bridge {
	t.Helper()
	rt, _ := runStoppable(t, cfg)
	return rt
}

// runStoppable runs a bridge and returns it with a stop function that
// cancels it and checks that Run returned nil (also called at cleanup).
func runStoppable(t testing.TB, cfg *routes.Config) (*Bridge, func()) {
	t.Helper()
	rt, err := New(cfg, Options{Logger: testLogger(t), Stdout: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	return rt, startRun(t, rt)
}

// startRun runs b; the returned stop (also called at cleanup) cancels it and
// checks that Run returned nil.
func startRun(t testing.TB, rt *Bridge) func() {
	t.Helper()
	return testservices.Start(t, rt.Run, nil)
}

// waitFor polls cond until it holds or the deadline passes. The deadline
// is for liveness, never a speed check: at least a minute, since a -race
// build on a loaded 2-core machine took over 20 s for what takes 1 s idle.
func waitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	timeout = max(timeout, time.Minute)
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(5 * time.Millisecond) // polling interval, not synchronisation
	}
}

// sink is an HTTP target that records message bodies and can be switched
// down (503) and up.
type sink struct {
	srv   *httptest.Server
	down  atomic.Bool
	mu    sync.Mutex
	got   map[string]int // body -> deliveries
	order []string
	// hook, when set, runs before the answer (in the handler goroutine).
	hook func(body string)
	// fail, when set, answers 503 to the requests it returns true for.
	fail  func(body string) bool
	total atomic.Int64
}

func newSink(t testing.TB) *sink {
	s := &sink{got: map[string]int{}}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if s.down.Load() || (s.fail != nil && s.fail(string(b))) {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		if s.hook != nil {
			s.hook(string(b))
		}
		s.mu.Lock()
		s.got[string(b)]++
		s.order = append(s.order, string(b))
		s.mu.Unlock()
		s.total.Add(1)
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *sink) distinct() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.got)
}

func (s *sink) count(body string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.got[body]
}

// publisher connects a paho client to a broker URL.
func publisher(t testing.TB, url, id string) paho.Client {
	t.Helper()
	o := paho.NewClientOptions().AddBroker(url).SetClientID(id).SetCleanSession(true).
		SetAutoReconnect(false).SetConnectTimeout(5 * time.Second).SetMaxResumePubInFlight(1000)
	c := paho.NewClient(o)
	var err error
	deadline := time.Now().Add(10 * time.Second)
	for {
		tok := c.Connect()
		tok.Wait()
		if err = tok.Error(); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("connect publisher to %s: %v", url, err)
		}
		time.Sleep(20 * time.Millisecond) // the broker may still be starting
	}
	t.Cleanup(func() { c.Disconnect(100) })
	return c
}

// waitTokens waits for every token, failing on an error.
func waitTokens(t testing.TB, toks []paho.Token, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for i, tok := range toks {
		if !tok.WaitTimeout(time.Until(deadline)) {
			t.Fatalf("token %d not complete after %s", i, timeout)
		}
		if err := tok.Error(); err != nil {
			t.Fatalf("token %d: %v", i, err)
		}
	}
}

func tokenDone(tok paho.Token) bool {
	select {
	case <-tok.Done():
		return true
	default:
		return false
	}
}

// httpGet returns status and body of a GET.
func httpGet(t testing.TB, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

var errTest = errors.New("test")

// getDead returns one dead letter by ID.
func getDead(b *Bridge, ctx context.Context, id string) (stores.Record, error) {
	recs, _, err := b.store.Dead(ctx, stores.DeadQuery{ID: id})
	if err != nil {
		return stores.Record{}, err
	}
	return recs[0], nil
}

// sessionStats returns the store's stats of session (zero when it holds
// nothing).
func sessionStats(t testing.TB, b *Bridge, session string) stores.SessionStats {
	t.Helper()
	all, err := b.store.Stats(context.Background())
	if err != nil {
		t.Fatalf("stats: %v", err)
	}
	for _, st := range all {
		if st.Session == session {
			return st
		}
	}
	return stores.SessionStats{Session: session}
}

func msgID(i int) string { return fmt.Sprintf("m-%05d", i) }

// httpStatus returns the status code of a GET, or the dial error.
func httpStatus(url string) (int, error) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, err
	}
	_ = resp.Body.Close()
	return resp.StatusCode, nil
}
