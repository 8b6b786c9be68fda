package drainer

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gobridge/gobridge/message"
	"github.com/gobridge/gobridge/senders"
	"github.com/gobridge/gobridge/stores"
	"github.com/gobridge/gobridge/stores/memory"
)

// scriptSender is a function-field fake: script decides the result of the
// n-th send (1-based) of an envelope ID. It logs every send in order.
type scriptSender struct {
	batch  int
	script func(ctx context.Context, env *message.Envelope, n int) error

	mu     sync.Mutex
	counts map[string]int
	log    []*message.Envelope
}

func newScriptSender(batch int, script func(ctx context.Context, env *message.Envelope, n int) error) *scriptSender {
	return &scriptSender{batch: batch, script: script, counts: map[string]int{}}
}

func (s *scriptSender) BatchSize() int { return s.batch }

func (s *scriptSender) Send(ctx context.Context, envs []*message.Envelope) []error {
	errs := make([]error, len(envs))
	for i, e := range envs {
		s.mu.Lock()
		s.counts[e.ID]++
		n := s.counts[e.ID]
		s.log = append(s.log, e)
		s.mu.Unlock()
		if s.script != nil {
			errs[i] = s.script(ctx, e, n)
		}
	}
	return errs
}

func (s *scriptSender) sends(id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.counts[id]
}

func (s *scriptSender) total() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.log)
}

// journal is an Observer that keeps everything for assertions.
type journal struct {
	mu        sync.Mutex
	outcomes  []Outcome
	limits    map[string][]int
	sent      int
	abandoned int
}

func newJournal() *journal { return &journal{limits: map[string][]int{}} }

func (j *journal) Delivered(o Outcome) {
	j.mu.Lock()
	j.outcomes = append(j.outcomes, o)
	j.mu.Unlock()
}

func (j *journal) Limit(route string, n int) {
	j.mu.Lock()
	j.limits[route] = append(j.limits[route], n)
	j.mu.Unlock()
}

func (j *journal) InFlight(string, int) {}

func (j *journal) Sent(string, time.Time) {
	j.mu.Lock()
	j.sent++
	j.mu.Unlock()
}

func (j *journal) Abandoned(string) {
	j.mu.Lock()
	j.abandoned++
	j.mu.Unlock()
}

// results counts outcomes by result.
func (j *journal) results() map[string]int {
	j.mu.Lock()
	defer j.mu.Unlock()
	m := map[string]int{}
	for _, o := range j.outcomes {
		m[o.Result]++
	}
	return m
}

func (j *journal) byID(id string) []Outcome {
	j.mu.Lock()
	defer j.mu.Unlock()
	var out []Outcome
	for _, o := range j.outcomes {
		if o.ID == id {
			out = append(out, o)
		}
	}
	return out
}

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) { w.t.Log(string(p)); return len(p), nil }

// testPolicy is a policy with small, test-friendly numbers.
func testPolicy() Policy {
	return Policy{
		MaxInFlight:       4,
		MaxReplayAttempts: 3,
		ReplayBudget:      time.Minute,
		SendTimeout:       5 * time.Second,
		Backoff:           Backoff{Initial: time.Second, Max: 10 * time.Second, Multiplier: 2},
	}
}

// testOptions drain session "s" of route "r" through sender.
func testOptions(t *testing.T, sender Sender, pol Policy, obs Observer) Options {
	return Options{
		Session:         "s",
		Partitions:      1,
		BatchSize:       10,
		Window:          40,
		Poll:            Poll{Min: time.Second, Max: time.Second},
		Routes:          map[string]Route{"r": {Sender: sender, Health: senders.NewHealth(), Policy: pol}},
		Owner:           "a",
		LeaseTTL:        3 * time.Second,
		ShutdownTimeout: 10 * time.Second,
		AbandonGrace:    2 * time.Second,
		Logger:          testLogger(t),
		Observer:        obs,
	}
}

// writer plays the bridge's group committer: it writes each settlement at
// once, and appends records the way the bridge does (Reserve, Write,
// Delivered). It counts claims through claimCounter.
type writer struct {
	t     *testing.T
	store stores.Store
	g     *Group
}

func (w *writer) Settle(s stores.Settlement) {
	if err := w.store.Write(context.Background(), &stores.Batch{Settle: []stores.Settlement{s}}); err != nil {
		w.t.Errorf("settle: %v", err)
	}
}

func (w *writer) Flush(context.Context) error { return nil }

// append appends recs through the hot path when g has room for them.
func (w *writer) append(recs ...stores.Record) {
	w.t.Helper()
	tokens := make([]int64, len(recs))
	for i := range recs {
		if w.g != nil {
			tokens[i] = w.g.Reserve(recs[i].Partition)
		}
		recs[i].Token = tokens[i]
	}
	b := stores.Batch{Append: recs}
	if err := w.store.Write(context.Background(), &b); err != nil {
		w.t.Fatalf("append: %v", err)
	}
	if w.g != nil {
		for i := range b.Append {
			w.g.Delivered(&b.Append[i], tokens[i])
		}
	}
}

// claimCounter counts the claims a drainer makes.
type claimCounter struct {
	stores.Store
	claims atomic.Int64
}

func (c *claimCounter) Claim(ctx context.Context, req stores.ClaimRequest) ([]stores.Record, error) {
	c.claims.Add(1)
	return c.Store.Claim(ctx, req)
}

// newGroup builds the drainer of opts over a fresh memory store.
func newGroup(t *testing.T, opts Options) (*Group, *writer, *claimCounter) {
	store := &claimCounter{Store: memory.New(memory.Options{})}
	g, w := newGroupOn(t, opts, store)
	return g, w, store
}

// newGroupOn builds the drainer of opts over store (another owner of it).
func newGroupOn(t *testing.T, opts Options, store *claimCounter) (*Group, *writer) {
	w := &writer{t: t, store: store}
	w.g = New(opts, store, w)
	return w.g, w
}

// records makes n records of route "r" in session "s", partition 0, with
// IDs "m000".. and ordering key keyOf(i) (nil: none).
func records(n int, keyOf func(i int) string) ([]stores.Record, []string) {
	recs := make([]stores.Record, n)
	ids := make([]string, n)
	for i := range recs {
		ids[i] = fmt.Sprintf("m%03d", i)
		env := message.Envelope{ID: ids[i], Topic: "t", Payload: []byte("p"), ReceivedAt: time.Now()}
		if keyOf != nil {
			env.Key = keyOf(i)
		}
		recs[i] = stores.Record{Session: "s", Route: "r", Envelope: env}
	}
	return recs, ids
}

// running starts g.Run; stop cancels it and returns Run's error.
func running(t *testing.T, g *Group) (stop func() error) {
	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() { errc <- g.Run(ctx) }()
	return func() error { cancel(); return <-errc }
}

// eventually advances the bubble's fake clock in steps until cond holds or
// limit of fake time has passed. Inside a synctest bubble time.Sleep only
// moves the fake clock once every goroutine is blocked: it costs no real
// time and is how the bubble is driven.
func eventually(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		synctest.Wait()
		if cond() {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not true after %v of fake time", what, limit)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// advance lets d of fake time pass in the bubble (see eventually).
func advance(d time.Duration) {
	time.Sleep(d)
	synctest.Wait()
}

// live counts the live records of session "s".
func live(t *testing.T, store stores.Store) int {
	t.Helper()
	all, err := store.Stats(context.Background())
	if err != nil {
		t.Fatalf("stats: %v", err)
	}
	for _, st := range all {
		if st.Session == "s" {
			return st.Live
		}
	}
	return 0
}

// dead returns the dead letters of session "s".
func dead(t *testing.T, store stores.Store) []stores.Record {
	t.Helper()
	got, _, err := store.Dead(context.Background(), stores.DeadQuery{Limit: 1000})
	if err != nil {
		t.Fatalf("dead: %v", err)
	}
	return got
}
