package drainer

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gobridge/gobridge/message"
	"github.com/gobridge/gobridge/routes"
	"github.com/gobridge/gobridge/senders"
	"github.com/gobridge/gobridge/stores"
	"github.com/gobridge/gobridge/stores/memory"
)

var errFlaky = errors.New("connection reset")

func TestGroup_DeliversEveryRecordOnce(t *testing.T) {
	backends(t, func(t *testing.T, store stores.Store) {
		snd := newScriptSender(3, nil)
		j := newJournal()
		g := New(testConfig(t, snd, testPolicy(), j), store, memory.NewLeases())
		ids := appendRecords(t, store, 45, nil)
		stop := running(t, g)
		eventually(t, time.Minute, "all delivered", func() bool { return pending(t, store) == 0 })
		if err := stop(); err != nil {
			t.Fatalf("Run: %v", err)
		}
		for _, id := range ids {
			if n := snd.sends(id); n != 1 {
				t.Errorf("%s sent %d times, want 1", id, n)
			}
		}
		if got := j.results()[ResultOK]; got != len(ids) {
			t.Errorf("ok outcomes = %d, want %d", got, len(ids))
		}
	})
}

func TestGroup_RetriesTransientWithBackoff(t *testing.T) {
	backends(t, func(t *testing.T, store stores.Store) {
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
		g := New(testConfig(t, snd, pol, j), store, memory.NewLeases())
		appendRecords(t, store, 1, nil)
		stop := running(t, g)
		eventually(t, time.Minute, "delivered", func() bool { return pending(t, store) == 0 })
		if err := stop(); err != nil {
			t.Fatalf("Run: %v", err)
		}
		if got := j.results(); got[ResultRetried] != 3 || got[ResultOK] != 1 || got[ResultDeadLettered] != 0 {
			t.Fatalf("outcomes %v, want 3 retried then 1 ok", got)
		}
		// Full jitter: the n-th retry waits at most initial × 2^(n−1) plus
		// one poll interval (1s fixed_poll, +10% jitter).
		for i := 1; i < len(sentAt); i++ {
			gap := sentAt[i].Sub(sentAt[i-1])
			if max := time.Duration(1<<(i-1))*time.Second + 1100*time.Millisecond; gap > max {
				t.Errorf("retry %d after %v, want <= %v", i, gap, max)
			}
		}
	})
}

func TestGroup_PoisonsOnlyAfterAttemptsAndBudget(t *testing.T) {
	backends(t, func(t *testing.T, store stores.Store) {
		snd := newScriptSender(1, func(context.Context, *message.Envelope, int) error { return errFlaky })
		j := newJournal()
		pol := testPolicy()
		pol.MaxReplayAttempts = 3
		pol.ReplayBudget = routes.Duration(2 * time.Minute)
		g := New(testConfig(t, snd, pol, j), store, memory.NewLeases())
		appendRecords(t, store, 1, nil)
		start := time.Now()
		stop := running(t, g)
		eventually(t, time.Hour, "poisoned", func() bool { return pending(t, store) == 0 })
		if err := stop(); err != nil {
			t.Fatalf("Run: %v", err)
		}
		dl, err := store.GetDead(context.Background(), "m000")
		if err != nil {
			t.Fatalf("GetDead: %v", err)
		}
		if dl.Attempts <= pol.MaxReplayAttempts {
			t.Errorf("poisoned after %d attempts, want > %d", dl.Attempts, pol.MaxReplayAttempts)
		}
		if age := dl.DeadAt.Sub(dl.FirstAttemptAt); age < pol.ReplayBudget.D() {
			t.Errorf("poisoned %v after the first attempt, want >= %v", age, pol.ReplayBudget.D())
		}
		// Attempts passed the floor within ~10s; the budget held it for 2m.
		if snd.sends("m000") < 8 || dl.DeadAt.Sub(start) > 3*time.Minute {
			t.Errorf("sends %d, dead after %v: want many retries, then dead soon after the budget", snd.sends("m000"), dl.DeadAt.Sub(start))
		}
		if !strings.Contains(dl.DeadReason, "connection reset") {
			t.Errorf("dead reason %q does not carry the last error", dl.DeadReason)
		}
	})
}

func TestGroup_PermanentFailureSettlesAtOnce(t *testing.T) {
	for _, policy := range []string{routes.PolicyDLQ, routes.PolicyDrop} {
		t.Run(policy, func(t *testing.T) {
			backends(t, func(t *testing.T, store stores.Store) {
				snd := newScriptSender(1, func(_ context.Context, e *message.Envelope, _ int) error {
					if e.ID == "m001" {
						return senders.Permanent(errors.New("payload too large"))
					}
					return nil
				})
				j := newJournal()
				pol := testPolicy()
				pol.OnPermanentFailure = policy
				g := New(testConfig(t, snd, pol, j), store, memory.NewLeases())
				appendRecords(t, store, 3, nil)
				stop := running(t, g)
				eventually(t, time.Minute, "settled", func() bool { return pending(t, store) == 0 })
				if err := stop(); err != nil {
					t.Fatalf("Run: %v", err)
				}
				if n := snd.sends("m001"); n != 1 {
					t.Errorf("permanent failure sent %d times, want 1", n)
				}
				_, err := store.GetDead(context.Background(), "m001")
				want := ResultDeadLettered
				if policy == routes.PolicyDrop {
					want = ResultDropped
					if !errors.Is(err, stores.ErrNotFound) {
						t.Errorf("dropped record is a dead letter: %v", err)
					}
				} else if err != nil {
					t.Errorf("GetDead: %v", err)
				}
				if o := j.byID("m001"); len(o) != 1 || o[0].Result != want {
					t.Errorf("outcomes %+v, want one %s", o, want)
				}
			})
		})
	}
}

func TestGroup_CapacityHalvesLimitAndWaitsRetryAfter(t *testing.T) {
	backends(t, func(t *testing.T, store stores.Store) {
		var firstAt, secondAt time.Time
		snd := newScriptSender(1, func(_ context.Context, e *message.Envelope, n int) error {
			if e.ID == "m000" {
				if n == 1 {
					firstAt = time.Now()
					return senders.Capacity(errors.New("429"), 45*time.Second)
				}
				secondAt = time.Now()
			}
			return nil
		})
		j := newJournal()
		pol := testPolicy()
		pol.MaxInFlight = 8
		pol.MaxReplayAttempts = 0
		pol.ReplayBudget = 0 // a transient failure would poison at once; capacity must not
		g := New(testConfig(t, snd, pol, j), store, memory.NewLeases())
		appendRecords(t, store, 1, nil)
		stop := running(t, g)
		eventually(t, 2*time.Minute, "delivered", func() bool { return pending(t, store) == 0 })
		if err := stop(); err != nil {
			t.Fatalf("Run: %v", err)
		}
		if gap := secondAt.Sub(firstAt); gap < 45*time.Second {
			t.Errorf("retried %v after a capacity error with retry-after 45s", gap)
		}
		if got := j.results(); got[ResultCapacity] != 1 || got[ResultOK] != 1 {
			t.Errorf("outcomes %v, want 1 capacity then 1 ok", got)
		}
		j.mu.Lock()
		lims := j.limits["r"]
		j.mu.Unlock()
		if len(lims) < 2 || lims[0] != 8 || lims[1] != 4 {
			t.Errorf("limits %v, want start 8 then halved to 4", lims)
		}
	})
}

func TestGroup_AbandonsSenderThatIgnoresContext(t *testing.T) {
	backends(t, func(t *testing.T, store stores.Store) {
		hang := make(chan struct{})
		snd := newScriptSender(1, func(_ context.Context, _ *message.Envelope, n int) error {
			if n == 1 {
				<-hang // ignores ctx
			}
			return nil
		})
		j := newJournal()
		g := New(testConfig(t, snd, testPolicy(), j), store, memory.NewLeases())
		appendRecords(t, store, 1, nil)
		stop := running(t, g)
		eventually(t, time.Minute, "redelivered", func() bool { return pending(t, store) == 0 })
		o := j.byID("m000")
		if len(o) != 2 || o[0].Result != ResultRetried || !strings.Contains(o[0].Err, "timed out") || o[1].Result != ResultOK {
			t.Errorf("outcomes %+v, want a timed-out retry then ok", o)
		}
		if j.abandoned != 1 {
			t.Errorf("abandoned = %d, want 1", j.abandoned)
		}
		close(hang)
		if err := stop(); err != nil {
			t.Fatalf("Run: %v", err)
		}
	})
}

func TestGroup_KeepsPerKeyOrderAcrossRetries(t *testing.T) {
	backends(t, func(t *testing.T, store stores.Store) {
		snd := newScriptSender(2, func(_ context.Context, e *message.Envelope, n int) error {
			if (e.ID == "m000" || e.ID == "m004") && n <= 2 {
				return errFlaky
			}
			return nil
		})
		j := newJournal()
		g := New(testConfig(t, snd, testPolicy(), j), store, memory.NewLeases())
		keys := []string{"a", "b", "c"}
		appendRecords(t, store, 12, func(i int) string { return keys[i%3] })
		stop := running(t, g)
		eventually(t, time.Minute, "delivered", func() bool { return pending(t, store) == 0 })
		if err := stop(); err != nil {
			t.Fatalf("Run: %v", err)
		}
		last := map[string]string{}
		for _, e := range snd.log {
			if e.ID < last[e.Key] {
				t.Fatalf("key %s: %s sent after %s", e.Key, e.ID, last[e.Key])
			}
			last[e.Key] = e.ID
		}
		// Key "c" (m002, m005, ...) never failed: it was not held back.
		if snd.sends("m011") != 1 {
			t.Errorf("m011 sent %d times", snd.sends("m011"))
		}
	})
}

func TestGroup_ExpiredRecordsFollowOnExpired(t *testing.T) {
	for _, policy := range []string{routes.PolicyDLQ, routes.PolicyDrop} {
		t.Run(policy, func(t *testing.T) {
			backends(t, func(t *testing.T, store stores.Store) {
				snd := newScriptSender(1, nil)
				j := newJournal()
				pol := testPolicy()
				pol.OnExpired = policy
				g := New(testConfig(t, snd, pol, j), store, memory.NewLeases())
				env := message.Envelope{ID: "old", Topic: "t"}
				if err := store.Append(t.Context(), stores.Record{Session: "s", Route: "r", Envelope: env,
					ExpiresAt: time.Now().Add(-time.Second)}); err != nil {
					t.Fatal(err)
				}
				stop := running(t, g)
				eventually(t, time.Minute, "settled", func() bool { return pending(t, store) == 0 })
				if err := stop(); err != nil {
					t.Fatalf("Run: %v", err)
				}
				if snd.total() != 0 {
					t.Errorf("an expired record was sent")
				}
				_, err := store.GetDead(context.Background(), "old")
				if (policy == routes.PolicyDLQ) != (err == nil) {
					t.Errorf("on_expired %s: GetDead error %v", policy, err)
				}
				if o := j.byID("old"); len(o) != 1 || o[0].Result != ResultExpired {
					t.Errorf("outcomes %+v, want one expired", o)
				}
			})
		})
	}
}

func TestGroup_WakeDeliversWithoutWaitingForThePoll(t *testing.T) {
	backends(t, func(t *testing.T, store stores.Store) {
		snd := newScriptSender(1, nil)
		cfg := testConfig(t, snd, testPolicy(), nil)
		cfg.DrainStrategy = routes.DrainStrategy{Type: routes.DrainFixedPoll, Interval: routes.Duration(time.Hour)}
		cfg.LeaseTTL = 3 * time.Hour
		g := New(cfg, store, memory.NewLeases())
		stop := running(t, g)
		advance(time.Second) // the first claim found nothing; the next poll is an hour away
		start := time.Now()
		appendRecords(t, store, 1, nil)
		g.Wake(0)
		g.Wake(0) // never blocks
		g.Wake(7) // out of range: ignored
		synctest.Wait()
		if pending(t, store) != 0 || time.Since(start) != 0 {
			t.Fatalf("not delivered at once after Wake (pending %d, waited %v)", pending(t, store), time.Since(start))
		}
		if err := stop(); err != nil {
			t.Fatalf("Run: %v", err)
		}
	})
}

func TestGroup_ShutdownFinishesInFlightAndReleasesTheRest(t *testing.T) {
	backends(t, func(t *testing.T, store stores.Store) {
		started := make(chan struct{}, 10)
		snd := newScriptSender(1, func(ctx context.Context, _ *message.Envelope, _ int) error {
			started <- struct{}{}
			select { // a send that takes 3s, well within the shutdown timeout
			case <-time.After(3 * time.Second):
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		})
		j := newJournal()
		pol := testPolicy()
		pol.MaxInFlight = 2
		leases := memory.NewLeases()
		g := New(testConfig(t, snd, pol, j), store, leases)
		appendRecords(t, store, 10, nil)
		stop := running(t, g)
		<-started
		<-started
		if err := stop(); err != nil {
			t.Fatalf("Run: %v", err)
		}
		if got := j.results()[ResultOK]; got != 2 {
			t.Errorf("%d sends finished, want the 2 in flight", got)
		}
		if n := pending(t, store); n != 8 {
			t.Fatalf("pending = %d, want 8", n)
		}
		// The rest is claimable at once by another owner.
		recs, err := store.Claim(context.Background(), stores.ClaimRequest{Session: "s", Token: 1 << 40,
			Limit: 100, Now: time.Now(), Until: time.Now().Add(time.Minute)})
		if err != nil || len(recs) != 8 {
			t.Errorf("claim after shutdown: %d records, %v; want 8", len(recs), err)
		}
		if ls, _ := leases.List(context.Background(), "", time.Now()); len(ls) != 0 {
			t.Errorf("leases still held after shutdown: %+v", ls)
		}
	})
}

func TestGroup_OrderingKeySpansRoutesOfASession(t *testing.T) {
	backends(t, func(t *testing.T, store stores.Store) {
		snd := newScriptSender(1, nil)
		cfg := testConfig(t, snd, testPolicy(), nil)
		cfg.Routes["r2"] = Route{Sender: snd, Policy: testPolicy()}
		cfg.DrainStrategy = routes.DrainStrategy{Type: routes.DrainFixedPoll, Interval: routes.Duration(time.Hour)}
		cfg.LeaseTTL = 3 * time.Hour
		g := New(cfg, store, memory.NewLeases())
		for i, route := range []string{"r", "r2", "r"} {
			env := message.Envelope{ID: fmt.Sprintf("k%d", i), Topic: "t", Key: "k"}
			if err := store.Append(t.Context(), stores.Record{Session: "s", Route: route, Envelope: env}); err != nil {
				t.Fatal(err)
			}
		}
		start := time.Now()
		stop := running(t, g)
		synctest.Wait()
		if n := pending(t, store); n != 0 || time.Since(start) != 0 {
			t.Fatalf("pending %d after %v: a key's later record on another route waited for a poll", n, time.Since(start))
		}
		var got []string
		for _, e := range snd.log {
			got = append(got, e.ID)
		}
		if strings.Join(got, ",") != "k0,k1,k2" {
			t.Errorf("send order %v, want k0,k1,k2", got)
		}
		if err := stop(); err != nil {
			t.Fatalf("Run: %v", err)
		}
	})
}

// claimCounter counts Claim calls on a real store.
type claimCounter struct {
	stores.Store
	n atomic.Int64
}

func (c *claimCounter) Claim(ctx context.Context, req stores.ClaimRequest) ([]stores.Record, error) {
	c.n.Add(1)
	return c.Store.Claim(ctx, req)
}

func TestGroup_AdaptiveBackoffPollsLessWhileIdle(t *testing.T) {
	backends(t, func(t *testing.T, store stores.Store) {
		cc := &claimCounter{Store: store}
		cfg := testConfig(t, newScriptSender(1, nil), testPolicy(), nil)
		cfg.DrainStrategy = routes.DrainStrategy{Type: routes.DrainAdaptiveBackoff,
			MinInterval: routes.Duration(100 * time.Millisecond), MaxInterval: routes.Duration(30 * time.Second), Multiplier: 2}
		g := New(cfg, cc, memory.NewLeases())
		stop := running(t, g)
		advance(10 * time.Minute)
		// 100ms doubling to 30s takes ~9 polls, then one per 30s (±10%).
		if n := cc.n.Load(); n < 20 || n > 40 {
			t.Errorf("%d claims in 10 idle minutes, want ~29", n)
		}
		// Records found: the next wait is min_interval again.
		appendRecords(t, store, 1, nil)
		g.Wake(0)
		synctest.Wait()
		before := cc.n.Load()
		advance(150 * time.Millisecond)
		if n := cc.n.Load() - before; n != 1 {
			t.Errorf("%d claims in the 150ms after finding records, want 1 (min_interval 100ms)", n)
		}
		if err := stop(); err != nil {
			t.Fatalf("Run: %v", err)
		}
	})
}

func TestGroup_StopsLaunchingFromALapsedClaim(t *testing.T) {
	backends(t, func(t *testing.T, store stores.Store) {
		// One send at a time, each taking just under send_timeout: the batch
		// outlives its claim deadline (send_timeout + grace + 10s = 17s).
		snd := newScriptSender(1, func(ctx context.Context, _ *message.Envelope, _ int) error {
			select {
			case <-time.After(4900 * time.Millisecond):
			case <-ctx.Done():
			}
			return nil
		})
		pol := testPolicy()
		pol.MaxInFlight = 1
		j := newJournal()
		g := New(testConfig(t, snd, pol, j), store, memory.NewLeases())
		ids := appendRecords(t, store, 5, nil)
		stop := running(t, g)
		eventually(t, 2*time.Minute, "delivered", func() bool { return pending(t, store) == 0 })
		if err := stop(); err != nil {
			t.Fatalf("Run: %v", err)
		}
		for i, id := range ids {
			o := j.byID(id)
			if snd.sends(id) != 1 || len(o) != 1 || o[0].Result != ResultOK {
				t.Fatalf("%s: sent %d times, outcomes %+v; want one ok send", id, snd.sends(id), o)
			}
			// m004 would start at 19.6s, past the 17s claim: it must wait
			// for a fresh claim instead of being sent on a lapsed one.
			if want := 1 + i/4; o[0].Attempt != want {
				t.Errorf("%s delivered on attempt %d, want %d", id, o[0].Attempt, want)
			}
		}
	})
}
