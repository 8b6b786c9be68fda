package drainer

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gobridge/gobridge/message"
	"github.com/gobridge/gobridge/senders"
	"github.com/gobridge/gobridge/stores"
)

// FuzzDrainer drives random failure scripts (ok, transient, capacity with a
// retry-after, permanent) through a Group on the memory store and checks the
// invariants of DESIGN.md §1.4–1.5 and §5.
func FuzzDrainer(f *testing.F) {
	f.Add(uint64(1), uint8(20), uint8(3))
	f.Add(uint64(2), uint8(39), uint8(0))
	f.Add(uint64(3), uint8(7), uint8(1))
	f.Add(uint64(42), uint8(30), uint8(2))
	f.Fuzz(func(t *testing.T, seed uint64, n, nkeys uint8) {
		synctest.Test(t, func(t *testing.T) { fuzzDrainer(t, seed, int(n%40)+1, int(nkeys%4)) })
	})
}

func fuzzDrainer(t *testing.T, seed uint64, count, keys int) {
	r := rand.New(rand.NewPCG(seed, 99))
	pol := testPolicy()
	pol.MaxInFlight = 1 + r.IntN(6)
	pol.MaxReplayAttempts = r.IntN(5)
	pol.ReplayBudget = time.Duration(r.IntN(120)) * time.Second
	pol.SendTimeout = 5 * time.Second
	pol.DropPermanent = r.IntN(2) == 0

	var mu sync.Mutex
	last := map[string]senders.Class{} // the class of each record's last send
	snd := newScriptSender(1+r.IntN(3), func(_ context.Context, e *message.Envelope, n int) error {
		h := fnv.New64a()
		h.Write([]byte(e.ID))
		rr := rand.New(rand.NewPCG(seed, h.Sum64()<<8|uint64(n)))
		var err error
		switch p := rr.IntN(100); {
		case p < 45:
		case p < 75:
			err = errFlaky
		case p < 93:
			err = senders.Capacity(errors.New("throttled"), time.Duration(rr.IntN(20))*time.Second)
		default:
			err = senders.Permanent(errors.New("rejected"))
		}
		c, _ := senders.Classify(err)
		mu.Lock()
		last[e.ID] = c
		mu.Unlock()
		return err
	})
	j := newJournal()
	opts := testOptions(t, snd, pol, j)
	opts.BatchSize = 1 + r.IntN(12)
	opts.Window = opts.BatchSize + r.IntN(20)
	g, w, store := newGroup(t, opts)
	var keyOf func(int) string
	if keys > 0 {
		keyOf = func(i int) string { return fmt.Sprintf("k%d", (i*7+int(seed))%keys) }
	}
	recs, ids := records(count, keyOf)
	split := r.IntN(count + 1) // some appended before the drainer runs, the rest while it runs
	w.append(recs[:split]...)
	stop := running(t, g)
	for i := split; i < count; i++ {
		w.append(recs[i])
		if r.IntN(4) == 0 {
			advance(time.Duration(r.IntN(3000)) * time.Millisecond)
		}
	}
	defer func() {
		if t.Failed() {
			if p := g.part(0); p != nil {
				p.mu.Lock()
				t.Logf("held %d reserved %d backlog %v inbox %d inflight %d ready %v timers %d keys %d", p.held, p.reserved, p.backlog, len(p.inbox), p.inflight, len(p.sched.ready["r"]), len(p.sched.timers), len(p.sched.keys))
				for k, q := range p.sched.keys {
					for _, it := range q {
						t.Logf("key %s: %s where %d due %v", k, it.rec.Envelope.ID, it.where, it.due)
					}
				}
				p.mu.Unlock()
			}
			t.Logf("health up %v", opts.Routes["r"].Health.Up())
		}
	}()
	eventually(t, 72*time.Hour, "all records settled", func() bool { return live(t, store) == 0 })
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}

	// Every record ends exactly once, as done, dead or dropped.
	for _, id := range ids {
		var terminal []string
		for _, o := range j.byID(id) {
			switch o.Result {
			case ResultOK, ResultDropped, ResultDeadLettered:
				terminal = append(terminal, o.Result)
			}
		}
		if len(terminal) != 1 {
			t.Fatalf("%s: terminal outcomes %v, want exactly one", id, terminal)
		}
		dls, _, err := store.Dead(context.Background(), stores.DeadQuery{ID: id})
		if (terminal[0] == ResultDeadLettered) != (err == nil) {
			t.Fatalf("%s: outcome %s but Dead: %v", id, terminal[0], err)
		}
		if err != nil {
			continue
		}
		dl := dls[0]
		// Nothing is poisoned before both thresholds; capacity never poisons.
		mu.Lock()
		c := last[id]
		mu.Unlock()
		switch c {
		case senders.Fatal:
		case senders.Transient:
			if dl.Attempts <= pol.MaxReplayAttempts || dl.DeadAt.Sub(dl.FirstAttemptAt) < pol.ReplayBudget {
				t.Fatalf("%s poisoned early: %d attempts (max %d), %v after the first (budget %v)", id,
					dl.Attempts, pol.MaxReplayAttempts, dl.DeadAt.Sub(dl.FirstAttemptAt), pol.ReplayBudget)
			}
			if !strings.HasPrefix(dl.DeadReason, "poisoned") {
				t.Fatalf("%s: dead reason %q", id, dl.DeadReason)
			}
		default:
			t.Fatalf("%s dead-lettered after a %v send", id, c)
		}
	}

	// Per-key order is never violated.
	lastSent := map[string]string{}
	for _, e := range snd.log {
		if e.Key == "" {
			continue
		}
		if e.ID < lastSent[e.Key] {
			t.Fatalf("key %s: %s sent after %s", e.Key, e.ID, lastSent[e.Key])
		}
		lastSent[e.Key] = e.ID
	}

	// The AIMD limit stays within [1, max_in_flight].
	for _, l := range j.limits["r"] {
		if l < 1 || l > pol.MaxInFlight {
			t.Fatalf("limit %d outside [1, %d]", l, pol.MaxInFlight)
		}
	}
}
