package drainer

import (
	"context"
	"testing"
	"time"

	"github.com/gobridge/gobridge/message"
	"github.com/gobridge/gobridge/stores"
	"github.com/gobridge/gobridge/stores/memory"
)

func TestGroup_ASlowSendDoesNotHoldTheNextBatch(t *testing.T) {
	backends(t, func(t *testing.T, store stores.Store) {
		release := make(chan struct{})
		snd := newScriptSender(1, func(ctx context.Context, e *message.Envelope, _ int) error {
			if e.ID == "m000" {
				select {
				case <-release:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			return nil
		})
		j := newJournal()
		cfg := testConfig(t, snd, testPolicy(), j)
		cfg.BatchSize = 2
		g := New(cfg, store, memory.NewLeases())
		ids := appendRecords(t, store, 4, nil)
		stop := running(t, g)
		// m002 and m003 are the next claim: they go out while m000 of the
		// first batch is still in flight (well within its send_timeout).
		eventually(t, 2*time.Second, "the next batch sent while m000 is in flight", func() bool {
			return snd.sends("m002") == 1 && snd.sends("m003") == 1
		})
		close(release)
		eventually(t, time.Minute, "delivered", func() bool { return pending(t, store) == 0 })
		if err := stop(); err != nil {
			t.Fatalf("Run: %v", err)
		}
		for _, id := range ids {
			if o := j.byID(id); snd.sends(id) != 1 || len(o) != 1 || o[0].Result != ResultOK {
				t.Fatalf("%s: sent %d times, outcomes %+v; want one ok send", id, snd.sends(id), o)
			}
		}
	})
}
