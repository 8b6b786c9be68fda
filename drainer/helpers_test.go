package drainer

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gobridge/gobridge/message"
	"github.com/gobridge/gobridge/routes"
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
func testPolicy() routes.Policy {
	return routes.Policy{
		MaxInFlight:        4,
		MaxReplayAttempts:  3,
		ReplayBudget:       routes.Duration(time.Minute),
		SendTimeout:        routes.Duration(5 * time.Second),
		OnExpired:          routes.PolicyDLQ,
		OnPermanentFailure: routes.PolicyDLQ,
		Backoff: routes.Backoff{InitialInterval: routes.Duration(time.Second),
			MaxInterval: routes.Duration(10 * time.Second), Multiplier: 2},
	}
}

// testConfig drains session "s" of route "r" through sender.
func testConfig(t *testing.T, sender Sender, pol routes.Policy, obs Observer) Config {
	return Config{
		Session:         "s",
		Partitions:      1,
		BatchSize:       10,
		DrainStrategy:   routes.DrainStrategy{Type: routes.DrainFixedPoll, Interval: routes.Duration(time.Second)},
		Routes:          map[string]Route{"r": {ID: "r", Sender: sender, Policy: pol}},
		Owner:           "a",
		LeaseTTL:        3 * time.Second,
		ShutdownTimeout: 10 * time.Second,
		Logger:          testLogger(t),
		Observer:        obs,
	}
}

// appendRecords appends n records of route "r" to session "s", partition 0,
// with IDs "m000".., ordering key keyOf(i) (nil: none).
func appendRecords(t *testing.T, store stores.Outbox, n int, keyOf func(i int) string) []string {
	t.Helper()
	recs := make([]stores.Record, n)
	ids := make([]string, n)
	for i := range recs {
		ids[i] = fmt.Sprintf("m%03d", i)
		env := message.Envelope{ID: ids[i], Topic: "t", Payload: []byte("p"), ReceivedAt: time.Now()}
		if keyOf != nil {
			env.Key = keyOf(i)
		}
		recs[i] = stores.Record{Session: "s", Partition: 0, Route: "r", Envelope: env}
	}
	if err := store.Append(t.Context(), recs...); err != nil {
		t.Fatalf("append: %v", err)
	}
	return ids
}

// running starts g.Run in the bubble; stop cancels it and returns Run's error.
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

func pending(t *testing.T, store stores.Outbox) int {
	t.Helper()
	st, err := store.Stats(context.Background(), "s")
	if err != nil {
		t.Fatalf("stats: %v", err)
	}
	return st.Pending
}

// backends runs fn against every outbox backend, each inside its own
// synctest bubble.
func backends(t *testing.T, fn func(t *testing.T, store stores.Store)) {
	t.Run("memory", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			store := memory.New()
			defer store.Close()
			fn(t, store)
		})
	})
	for _, b := range extraBackends {
		t.Run(b.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				store := b.open(t)
				defer store.Close()
				fn(t, store)
			})
		})
	}
}

// extraBackends lists the durable backends tested like memory.
var extraBackends []struct {
	name string
	open func(t *testing.T) stores.Store
}
