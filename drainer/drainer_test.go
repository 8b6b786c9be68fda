package drainer

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gobridge/gobridge/message"
	"github.com/gobridge/gobridge/senders"
)

var errFlaky = errors.New("connection reset")

func TestGroup_DeliversEveryRecordOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		snd := newScriptSender(3, nil)
		j := newJournal()
		g, w, store := newGroup(t, testOptions(t, snd, testPolicy(), j))
		backlog, ids := records(45, nil) // appended before the drainer runs: claimed from the store
		w.append(backlog...)
		stop := running(t, g)
		eventually(t, time.Minute, "backlog delivered", func() bool { return live(t, store) == 0 })
		hot, hotIDs := records(30, nil) // appended while it runs: handed over in memory
		for i := range hot {
			hot[i].Envelope.ID = "h" + hot[i].Envelope.ID
			hotIDs[i] = hot[i].Envelope.ID
			w.append(hot[i])
		}
		eventually(t, time.Minute, "hot records delivered", func() bool { return live(t, store) == 0 })
		if err := stop(); err != nil {
			t.Fatalf("Run: %v", err)
		}
		for _, id := range append(ids, hotIDs...) {
			if n := snd.sends(id); n != 1 {
				t.Errorf("%s sent %d times, want 1", id, n)
			}
		}
		if got := j.results()[ResultOK]; got != 75 {
			t.Errorf("ok outcomes = %d, want 75", got)
		}
	})
}

func TestGroup_RetriesTransientWithBackoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var sentAt []time.Time
		snd := newScriptSender(1, func(_ context.Context, _ *message.Envelope, n int) error {
			sentAt = append(sentAt, time.Now())
			if n <= 3 {
				return errFlaky
			}
			return nil
		})
		j := newJournal()
		pol := testPolicy()
		pol.MaxReplayAttempts = 1 // attempts alone must not poison: the budget (1m) holds it
		g, w, store := newGroup(t, testOptions(t, snd, pol, j))
		recs, _ := records(1, nil)
		w.append(recs...)
		stop := running(t, g)
		eventually(t, time.Minute, "delivered", func() bool { return live(t, store) == 0 })
		if err := stop(); err != nil {
			t.Fatalf("Run: %v", err)
		}
		if got := j.results(); got[ResultTransient] != 3 || got[ResultOK] != 1 || got[ResultDeadLettered] != 0 {
			t.Fatalf("outcomes %v, want 3 transient then 1 ok", got)
		}
		for i := 1; i < len(sentAt); i++ { // full jitter: the n-th retry waits at most initial × 2^(n−1)
			if gap, ceil := sentAt[i].Sub(sentAt[i-1]), time.Duration(1<<(i-1))*time.Second; gap > ceil {
				t.Errorf("retry %d after %v, want <= %v", i, gap, ceil)
			}
		}
	})
}

func TestGroup_PoisonsOnlyAfterAttemptsBudgetAndAnotherDelivery(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		snd := newScriptSender(1, func(_ context.Context, e *message.Envelope, _ int) error {
			if e.ID == "m000" {
				return errFlaky // the poison record
			}
			return nil
		})
		j := newJournal()
		g, w, store := newGroup(t, testOptions(t, snd, testPolicy(), j))
		recs, _ := records(1, nil)
		w.append(recs...)
		stop := running(t, g)
		// Attempts pass 3 quickly; the budget is 1m; meanwhile nothing else
		// was delivered: the target might be down, so the record waits.
		advance(3 * time.Minute)
		if n := len(dead(t, store)); n != 0 {
			t.Fatalf("dead-lettered with no other delivery in the window: %d", n)
		}
		good, _ := records(1, nil)
		good[0].Envelope.ID = "good"
		w.append(good...)
		eventually(t, time.Minute, "poisoned", func() bool { return len(dead(t, store)) == 1 })
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		d := dead(t, store)[0]
		if d.Envelope.ID != "m000" || !strings.HasPrefix(d.DeadReason, "poisoned after") || d.Attempts <= 3 {
			t.Errorf("dead letter %s: %q after %d attempts", d.Envelope.ID, d.DeadReason, d.Attempts)
		}
	})
}

func TestGroup_PermanentFailureSettlesAtOnce(t *testing.T) {
	for _, drop := range []bool{false, true} {
		t.Run(fmt.Sprintf("drop=%v", drop), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				snd := newScriptSender(1, func(context.Context, *message.Envelope, int) error {
					return senders.Permanent(errors.New("http 400"))
				})
				j := newJournal()
				pol := testPolicy()
				pol.DropPermanent = drop
				g, w, store := newGroup(t, testOptions(t, snd, pol, j))
				recs, _ := records(3, nil)
				w.append(recs...)
				stop := running(t, g)
				eventually(t, time.Minute, "settled", func() bool { return live(t, store) == 0 })
				if err := stop(); err != nil {
					t.Fatal(err)
				}
				wantDead := 3
				if drop {
					wantDead = 0
				}
				if dl := dead(t, store); len(dl) != wantDead || snd.total() != 3 {
					t.Errorf("%d dead letters after %d sends, want %d after 3", len(dl), snd.total(), wantDead)
				}
				for _, d := range dead(t, store) { // `dlq list` shows FIRST ATTEMPT: it was sent once
					if d.Attempts != 1 || d.FirstAttemptAt.IsZero() {
						t.Errorf("dead letter %s: %d attempts, first at %v; want 1, set", d.Envelope.ID, d.Attempts, d.FirstAttemptAt)
					}
				}
			})
		})
	}
}

func TestGroup_CapacityHalvesLimitAndWaitsRetryAfter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var sentAt []time.Time
		snd := newScriptSender(1, func(_ context.Context, _ *message.Envelope, n int) error {
			sentAt = append(sentAt, time.Now())
			if n == 1 {
				return senders.Capacity(errors.New("429"), 7*time.Second)
			}
			return nil
		})
		j := newJournal()
		pol := testPolicy()
		pol.MaxReplayAttempts = 0 // capacity errors never count: nothing may be poisoned
		pol.ReplayBudget = 0
		g, w, store := newGroup(t, testOptions(t, snd, pol, j))
		recs, _ := records(1, nil)
		w.append(recs...)
		stop := running(t, g)
		eventually(t, time.Minute, "delivered", func() bool { return live(t, store) == 0 })
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		if len(sentAt) != 2 || sentAt[1].Sub(sentAt[0]) < 7*time.Second {
			t.Errorf("sends at %v, want the retry after 7s", sentAt)
		}
		if ls := j.limits["r"]; len(ls) < 2 || ls[1] != ls[0]/2 {
			t.Errorf("limits %v, want the first halved", ls)
		}
	})
}

func TestGroup_AbandonsSenderThatIgnoresContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		snd := newScriptSender(1, func(_ context.Context, _ *message.Envelope, n int) error {
			if n == 1 {
				<-release // ignores its context
			}
			return nil
		})
		j := newJournal()
		g, w, store := newGroup(t, testOptions(t, snd, testPolicy(), j))
		recs, _ := records(1, nil)
		w.append(recs...)
		stop := running(t, g)
		eventually(t, time.Minute, "delivered by the retry", func() bool { return live(t, store) == 0 })
		close(release)
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		if j.abandoned != 1 || snd.total() != 2 {
			t.Errorf("abandoned %d, sends %d; want 1 and 2", j.abandoned, snd.total())
		}
	})
}

func TestGroup_KeepsPerKeyOrderAcrossRetries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		snd := newScriptSender(1, func(_ context.Context, e *message.Envelope, n int) error {
			if e.ID == "m000" && n <= 2 {
				return errFlaky
			}
			return nil
		})
		g, w, store := newGroup(t, testOptions(t, snd, testPolicy(), nil))
		recs, _ := records(20, func(i int) string { return fmt.Sprintf("k%d", i%2) })
		stop := running(t, g)
		w.append(recs[:10]...) // some hot, then more than the window holds
		w.append(recs[10:]...)
		eventually(t, time.Minute, "delivered", func() bool { return live(t, store) == 0 })
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		last := map[string]string{}
		for _, e := range snd.log {
			if prev := last[e.Key]; prev > e.ID {
				t.Errorf("key %s: %s sent after %s", e.Key, e.ID, prev)
			}
			last[e.Key] = e.ID
		}
	})
}

func TestGroup_ExpiredRecordsFollowOnExpired(t *testing.T) {
	for _, drop := range []bool{false, true} {
		t.Run(fmt.Sprintf("drop=%v", drop), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				snd := newScriptSender(1, nil)
				pol := testPolicy()
				pol.DropExpired = drop
				g, w, store := newGroup(t, testOptions(t, snd, pol, nil))
				recs, _ := records(2, nil)
				recs[0].ExpiresAt = time.Now().Add(-time.Second)
				w.append(recs...)
				stop := running(t, g)
				eventually(t, time.Minute, "settled", func() bool { return live(t, store) == 0 })
				if err := stop(); err != nil {
					t.Fatal(err)
				}
				d := dead(t, store)
				if snd.total() != 1 || (drop && len(d) != 0) || (!drop && (len(d) != 1 || d[0].DeadReason != "expired")) {
					t.Errorf("sends %d, dead letters %+v", snd.total(), d)
				}
			})
		})
	}
}

func TestGroup_ADownTargetGetsProbesNotOneRequestPerRecord(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		down := true
		snd := newScriptSender(1, func(context.Context, *message.Envelope, int) error {
			if down {
				return errors.New("http 401: token expired")
			}
			return nil
		})
		opts := testOptions(t, snd, testPolicy(), nil)
		opts.Routes["r"] = Route{Sender: snd, Health: senders.NewHealth(), Policy: opts.Routes["r"].Policy}
		g, w, store := newGroup(t, opts)
		recs, _ := records(40, nil)
		w.append(recs...)
		stop := running(t, g)
		advance(10 * time.Minute)
		during := snd.total()
		// One probe per backoff step (1s doubling to 10s): ~60 in 10 minutes,
		// not 40 records × 60 steps; and nothing is dead-lettered.
		if during > 100 || len(dead(t, store)) != 0 {
			t.Fatalf("%d requests during a 10-minute outage of a 40-record backlog, %d dead letters", during, len(dead(t, store)))
		}
		down = false
		eventually(t, time.Minute, "delivered after the outage", func() bool { return live(t, store) == 0 })
		if err := stop(); err != nil {
			t.Fatal(err)
		}
	})
}

func TestGroup_HoldsWhatWouldDieWhenDeadLettersAreFull(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		full := true
		snd := newScriptSender(1, func(context.Context, *message.Envelope, int) error {
			return senders.Permanent(errors.New("http 422"))
		})
		opts := testOptions(t, snd, testPolicy(), nil)
		r := opts.Routes["r"]
		r.DeadFull = func() bool { return full }
		opts.Routes["r"] = r
		g, w, store := newGroup(t, opts)
		recs, _ := records(2, nil)
		w.append(recs...)
		stop := running(t, g)
		advance(time.Minute)
		if n := len(dead(t, store)); n != 0 || live(t, store) != 2 {
			t.Fatalf("with dead letters full: %d dead, %d live; want 0 and 2", n, live(t, store))
		}
		full = false
		eventually(t, time.Minute, "dead-lettered once there is room", func() bool { return len(dead(t, store)) == 2 })
		if err := stop(); err != nil {
			t.Fatal(err)
		}
	})
}

// TestGroup_RunsProcessorsOfRawRecords checks that every record of a send
// is prepared (processors of a raw record, expiry), also when the sender
// takes several records per call.
func TestGroup_RunsProcessorsOfRawRecords(t *testing.T) {
	for _, batch := range []int{1, 10} {
		t.Run(fmt.Sprintf("batch=%d", batch), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				snd := newScriptSender(batch, nil)
				opts := testOptions(t, snd, testPolicy(), nil)
				r := opts.Routes["r"]
				r.Prepare = func(env *message.Envelope) (bool, error) {
					switch string(env.Payload) {
					case "drop":
						return true, nil
					case "bad":
						return false, errors.New("no such field")
					}
					env.Payload = append([]byte("processed:"), env.Payload...)
					return false, nil
				}
				opts.Routes["r"] = r
				g, w, store := newGroup(t, opts)
				recs, _ := records(5, nil)
				for i, p := range []string{"ok", "drop", "bad", "late", "ok2"} {
					recs[i].Raw, recs[i].Envelope.Payload = true, []byte(p)
				}
				recs[3].ExpiresAt = time.Now().Add(-time.Second)
				w.append(recs...)
				stop := running(t, g)
				eventually(t, time.Minute, "settled", func() bool { return live(t, store) == 0 })
				if err := stop(); err != nil {
					t.Fatal(err)
				}
				var sent []string
				for _, e := range snd.log {
					sent = append(sent, string(e.Payload))
				}
				slices.Sort(sent) // no ordering key: sent concurrently, in any order
				reasons := map[string]string{}
				for _, d := range dead(t, store) {
					reasons[string(d.Envelope.Payload)] = d.DeadReason
				}
				if !slices.Equal(sent, []string{"processed:ok", "processed:ok2"}) ||
					!maps.Equal(reasons, map[string]string{"bad": "processor: no such field", "late": "expired"}) {
					t.Errorf("sent %q, dead letters %v", sent, reasons)
				}
			})
		})
	}
}

func TestGroup_ShutdownFinishesInFlightAndLeavesTheRestClaimed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		gate := make(chan struct{})
		snd := newScriptSender(1, func(ctx context.Context, _ *message.Envelope, _ int) error {
			select {
			case <-gate:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		})
		opts := testOptions(t, snd, testPolicy(), nil)
		g, w, store := newGroup(t, opts)
		recs, _ := records(10, nil)
		w.append(recs...)
		stop := running(t, g)
		eventually(t, time.Minute, "sends in flight", func() bool { return snd.total() == 4 })
		errc := make(chan error, 1)
		go func() { errc <- stop() }()
		synctest.Wait()
		close(gate) // the sends in flight finish during the shutdown
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
		if live(t, store) != 6 {
			t.Fatalf("live after shutdown = %d, want the 6 unsent", live(t, store))
		}
		// The next owner takes the rest over at once.
		g2, _ := newGroupOn(t, opts, store)
		stop2 := running(t, g2)
		eventually(t, time.Minute, "delivered by the next owner", func() bool { return live(t, store) == 0 })
		if err := stop2(); err != nil {
			t.Fatal(err)
		}
	})
}
