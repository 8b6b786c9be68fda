package drainer

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gobridge/gobridge/message"
	"github.com/gobridge/gobridge/stores"
	"github.com/gobridge/gobridge/stores/memory"
	"github.com/gobridge/gobridge/stores/sqlite"
)

// fiftySixYears is the step NTP makes on a box that booted at 1970.
const fiftySixYears = 56 * 365 * 24 * time.Hour

// wallClock is a wall clock that a test steps, like NTP or an operator
// setting the time: its readings follow the bubble's clock plus an offset,
// and carry no monotonic reading (time.Now's does, which spares the
// in-memory comparisons of a real process from a step; this clock spares
// nothing, so it is the harsher test).
type wallClock struct{ off atomic.Int64 }

// newBootClock returns a clock that reads 1970-01-01 00:00:30 now, as on a
// box without a real-time clock, 30 s after boot.
func newBootClock() *wallClock {
	c := &wallClock{}
	c.off.Store(int64(time.Until(time.Unix(30, 0))))
	return c
}

func (c *wallClock) now() time.Time       { return time.Now().Round(0).Add(time.Duration(c.off.Load())) }
func (c *wallClock) step(d time.Duration) { c.off.Add(int64(d)) }

// openSQLite opens a real SQLite outbox on clock in a fresh directory.
func openSQLite(t *testing.T, clock *wallClock) *claimCounter {
	t.Helper()
	s, err := sqlite.Open(filepath.Join(t.TempDir(), "outbox.db"), sqlite.Options{Now: clock.now})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return &claimCounter{Store: s}
}

// clockRecords makes n records of route "r" received now on clock, with a
// ttl (0: none), spread over four ordering keys.
func clockRecords(n int, clock *wallClock, ttl time.Duration) []stores.Record {
	recs := make([]stores.Record, n)
	for i := range recs {
		at := clock.now()
		env := message.Envelope{ID: fmt.Sprintf("m%03d", i), Topic: "t", Payload: []byte("p"), ReceivedAt: at, Key: fmt.Sprintf("k%d", i%4)}
		recs[i] = stores.Record{Session: "s", Route: "r", Envelope: env}
		if ttl > 0 {
			recs[i].ExpiresAt = at.Add(ttl)
		}
	}
	return recs
}

// stepOptions are testOptions with a small window, so that most of the
// records wait in the store, on clock.
func stepOptions(t *testing.T, snd Sender, j *journal, clock *wallClock) Options {
	pol := testPolicy()
	pol.MaxReplayAttempts = 1 // poisoned after two failures, once the budget (1m) has passed
	opts := testOptions(t, snd, pol, j)
	opts.Window, opts.BatchSize, opts.Now = 8, 4, clock.now
	return opts
}

// checkDeliveredInOrder fails unless every one of n records was delivered
// exactly once, nothing was dead-lettered or expired, and each key's
// records were accepted in persist order.
func checkDeliveredInOrder(t *testing.T, j *journal, store stores.Store, n int) {
	t.Helper()
	if d := dead(t, store); len(d) > 0 {
		t.Errorf("%d dead letters, first %s: %s", len(d), d[0].Envelope.ID, d[0].DeadReason)
	}
	got := j.results()
	if got[ResultOK] != n || got[ResultExpired] != 0 || got[ResultDeadLettered] != 0 {
		t.Errorf("outcomes %v, want %d ok and nothing expired or dead", got, n)
	}
	last := map[int]string{}
	j.mu.Lock()
	defer j.mu.Unlock()
	for _, o := range j.outcomes {
		if o.Result != ResultOK {
			continue
		}
		var i int
		fmt.Sscanf(o.ID, "m%d", &i)
		if prev := last[i%4]; prev >= o.ID {
			t.Errorf("key k%d: %s accepted after %s", i%4, o.ID, prev)
		}
		last[i%4] = o.ID
	}
}

// flaky fails the first two sends of every fifth record: a target that
// fails now and then. Each send takes 10 ms.
func flaky(_ context.Context, env *message.Envelope, n int) error {
	time.Sleep(10 * time.Millisecond)
	var i int
	fmt.Sscanf(env.ID, "m%d", &i)
	if i%5 == 0 && n <= 2 {
		return errFlaky
	}
	return nil
}

// A box boots at 1970, takes in a backlog with a ten-minute TTL and starts
// draining it to a flaky target; NTP then steps the clock 56 years forward.
// The records are seconds old, not 56 years: none expires or is poisoned.
func TestGroup_ForwardClockStepKeepsRecordsYoung(t *testing.T) {
	for name, open := range map[string]func(*testing.T, *wallClock) *claimCounter{
		"sqlite": openSQLite,
		"memory": func(_ *testing.T, c *wallClock) *claimCounter {
			return &claimCounter{Store: memory.New(memory.Options{Now: c.now})}
		},
	} {
		t.Run(name, func(t *testing.T) { forwardStep(t, open) })
	}
}

func forwardStep(t *testing.T, open func(*testing.T, *wallClock) *claimCounter) {
	synctest.Test(t, func(t *testing.T) {
		clock := newBootClock()
		store := open(t, clock)
		snd := newScriptSender(2, flaky)
		j := newJournal()
		g, w := newGroupOn(t, stepOptions(t, snd, j, clock), store)
		w.append(clockRecords(40, clock, 10*time.Minute)...)
		stop := running(t, g)
		advance(100 * time.Millisecond) // some delivered, some failed once, most in the store
		if live(t, store) < 20 {
			t.Fatalf("only %d records left before the step: no backlog", live(t, store))
		}
		clock.step(fiftySixYears)
		eventually(t, 5*time.Minute, "backlog drained", func() bool { return live(t, store) == 0 })
		if err := stop(); err != nil {
			t.Fatalf("Run: %v", err)
		}
		checkDeliveredInOrder(t, j, store, 40)
	})
}

// A box whose clock was set ahead (a bad NTP server) retried records and
// stopped; it restarts after the clock was set 56 years back. The stored
// retry times lie 56 years ahead: each is due within backoff.max_interval,
// not in 56 years.
func TestGroup_BackwardClockStepBoundsStoredRetryTimes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clock := newBootClock()
		clock.step(fiftySixYears)
		store := openSQLite(t, clock)
		down := newScriptSender(2, func(context.Context, *message.Envelope, int) error { return errFlaky })
		first := stepOptions(t, down, newJournal(), clock)
		g, w := newGroupOn(t, first, store)
		w.append(clockRecords(12, clock, 0)...)
		stop := running(t, g)
		eventually(t, time.Minute, "records retried", func() bool { return down.total() >= 4 })
		if err := stop(); err != nil {
			t.Fatalf("Run: %v", err)
		}

		clock.step(-fiftySixYears)
		snd := newScriptSender(2, nil)
		j := newJournal()
		g, _ = newGroupOn(t, stepOptions(t, snd, j, clock), store)
		stop = running(t, g)
		eventually(t, 2*time.Minute, "retries after the step back", func() bool { return live(t, store) == 0 })
		if err := stop(); err != nil {
			t.Fatalf("Run: %v", err)
		}
		checkDeliveredInOrder(t, j, store, 12)
	})
}

// The same box steps back 56 years while it drains: records it holds and
// retries, and those it claims from the store, keep flowing.
func TestGroup_BackwardClockStepWhileDraining(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clock := newBootClock()
		clock.step(fiftySixYears)
		store := openSQLite(t, clock)
		snd := newScriptSender(2, flaky)
		j := newJournal()
		g, w := newGroupOn(t, stepOptions(t, snd, j, clock), store)
		w.append(clockRecords(40, clock, 10*time.Minute)...)
		stop := running(t, g)
		advance(1500 * time.Millisecond)
		clock.step(-fiftySixYears)
		eventually(t, 5*time.Minute, "backlog drained", func() bool { return live(t, store) == 0 })
		if err := stop(); err != nil {
			t.Fatalf("Run: %v", err)
		}
		checkDeliveredInOrder(t, j, store, 40)
	})
}

// renewOutage is the memory store with a switch that makes Renew fail, as
// during a store outage.
type renewOutage struct {
	*claimCounter
	down atomic.Bool
}

func (s *renewOutage) Renew(ctx context.Context, l stores.Lease, ttl time.Duration, now time.Time) (stores.Lease, error) {
	if s.down.Load() {
		return stores.Lease{}, errors.New("store unreachable")
	}
	return s.claimCounter.Renew(ctx, l, ttl, now)
}

// The clock is set 56 years back, then the store cannot be reached: the
// holder stops sending once its lease may have run out (LeaseTTL − margin
// after its last renewal), not 56 years later, as another instance may
// hold the partition by then.
func TestGroup_BackwardClockStepDoesNotStretchTheLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clock := newBootClock()
		clock.step(fiftySixYears)
		snd := newScriptSender(1, func(ctx context.Context, _ *message.Envelope, _ int) error {
			<-ctx.Done() // in flight until the drainer cancels it
			return ctx.Err()
		})
		store := &renewOutage{claimCounter: &claimCounter{Store: memory.New(memory.Options{Now: clock.now})}}
		opts := stepOptions(t, snd, newJournal(), clock)
		w := &writer{t: t, store: store}
		w.g = New(opts, store, w)
		w.append(clockRecords(3, clock, 0)...)
		stop := running(t, w.g)
		eventually(t, time.Second, "sending", func() bool { return snd.total() > 0 })
		clock.step(-fiftySixYears)
		store.down.Store(true)
		eventually(t, opts.LeaseTTL, "the loop stopped", func() bool { return w.g.part(0) == nil })
		store.down.Store(false)
		if err := stop(); err != nil {
			t.Fatalf("Run: %v", err)
		}
	})
}
