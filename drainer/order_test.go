package drainer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gobridge/gobridge/message"
	"github.com/gobridge/gobridge/senders"
	"github.com/gobridge/gobridge/stores"
)

// blocked runs a drainer of window (and batch size) window holding n
// records of key "a", appended hot, whose sends block until release is
// closed. It returns the drainer, its store, the sender and Run's stop.
func blocked(t *testing.T, window, n int) (g *Group, store *claimCounter, snd *scriptSender, release chan struct{}, stop func() error) {
	release = make(chan struct{})
	snd = newScriptSender(1, func(ctx context.Context, e *message.Envelope, _ int) error {
		if e.Key == "a" {
			select {
			case <-release:
			case <-ctx.Done():
			}
		}
		return nil
	})
	opts := testOptions(t, snd, testPolicy(), nil)
	opts.Window, opts.BatchSize = window, window
	g, w, store := newGroup(t, opts)
	stop = running(t, g)
	waitCaughtUp(t, g)
	held, _ := records(n, func(int) string { return "a" })
	for i := range held {
		held[i].Envelope.ID = fmt.Sprintf("a%d", i)
	}
	w.append(held...) // hot, sent, and the sends block
	synctest.Wait()
	return g, store, snd, release, stop
}

// commit writes batch, each record under its token, runs between (when
// set), then hands the records over as the writer does.
func commit(t *testing.T, g *Group, store stores.Store, batch []stores.Record, tokens []int64, between func()) {
	for i := range batch {
		batch[i].Token = tokens[i]
	}
	b := stores.Batch{Append: batch}
	if err := store.Write(context.Background(), &b); err != nil {
		t.Fatal(err)
	}
	if between != nil {
		between()
	}
	for i := range b.Append {
		g.Delivered(&b.Append[i], tokens[i])
	}
}

// sentInOrder waits until the store is empty, stops the drainer and checks
// that key k's records were sent as want.
func sentInOrder(t *testing.T, store *claimCounter, snd *scriptSender, stop func() error, want ...string) {
	eventually(t, time.Minute, "delivered", func() bool { return live(t, store) == 0 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range snd.log {
		if e.Key == "k" {
			got = append(got, e.ID)
		}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("key k sent %v, want %v", got, want)
	}
}

// TestGroup_ClaimDoesNotOvertakeHotRecordsOfItsBatch: one write appends
// records of one key, the first claimed under the partition's lease (the
// window had room for them) and the rest unclaimed (the window was full).
// A claim that runs once the write committed, but before the writer handed
// the claimed ones over (Delivered), takes the unclaimed ones; they must
// still be sent after the claimed ones, which have lower Seqs. Found by
// the e2e outage benchmark (per-key order violations while a backlog
// drained under fresh ingest).
func TestGroup_ClaimDoesNotOvertakeHotRecordsOfItsBatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, store, snd, release, stop := blocked(t, 4, 2)
		// The writer's next batch: room for two, then the window is full.
		batch, _ := records(4, func(int) string { return "k" })
		tokens := make([]int64, len(batch))
		for i := range batch {
			tokens[i] = g.Reserve(0)
		}
		if tokens[0] == 0 || tokens[1] == 0 || tokens[2] != 0 || tokens[3] != 0 {
			t.Fatalf("reservations %v, want two tokens then two zeros", tokens)
		}
		commit(t, g, store, batch, tokens, func() {
			close(release) // room frees up: the drainer claims before Delivered
			synctest.Wait()
		})
		sentInOrder(t, store, snd, stop, "m000", "m001", "m002", "m003")
	})
}

// TestGroup_AClaimDuringAWriteKeepsTheBacklog: the writer reserves a batch
// record by record and commits it after. When the window is full, a
// record is told to go unclaimed; a claim that runs before that record is
// committed finds the store empty, but must not end the backlog: the
// batch's next record would then be reserved (held in memory) and sent
// before the unclaimed one, which a later claim takes. Found by the e2e
// SQS FIFO test (an order violation under load).
func TestGroup_AClaimDuringAWriteKeepsTheBacklog(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, store, snd, release, stop := blocked(t, 1, 1) // the window is full
		batch, _ := records(2, func(int) string { return "k" })
		tokens := []int64{g.Reserve(0), 0}
		if tokens[0] != 0 {
			t.Fatalf("reservation %d with the window full, want 0", tokens[0])
		}
		close(release) // room frees up: the drainer claims while the batch is not committed
		synctest.Wait()
		tokens[1] = g.Reserve(0)
		commit(t, g, store, batch, tokens, nil)
		sentInOrder(t, store, snd, stop, "m000", "m001")
	})
}

// TestGroup_APartitionAcquiredDuringAWriteKeepsItsBacklog: the writer
// reserves records of a partition this instance does not drain yet (at
// start, or while a lease moves here), so they go unclaimed. The partition
// is acquired and claims before that write commits, finding nothing: it
// must not end its backlog, or the batch's next record would be reserved
// (held in memory) and sent before the earlier, unclaimed ones. Found as a
// rare failure of TestGroup_KeepsPerKeyOrderAcrossRetries.
func TestGroup_APartitionAcquiredDuringAWriteKeepsItsBacklog(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		snd := newScriptSender(1, nil)
		g, _, store := newGroup(t, testOptions(t, snd, testPolicy(), nil))
		batch, _ := records(3, func(int) string { return "k" })
		tokens := []int64{g.Reserve(0), g.Reserve(0), 0} // no partition yet
		stop := running(t, g)
		eventually(t, time.Minute, "partition 0 held", func() bool { return g.part(0) != nil })
		synctest.Wait() // and its first claim done
		tokens[2] = g.Reserve(0)
		commit(t, g, store, batch, tokens, nil)
		sentInOrder(t, store, snd, stop, "m000", "m001", "m002")
	})
}

// TestGroup_AHeldRecordDoesNotHalveTheLimit: a record a sender held unsent
// behind an earlier one that failed (senders.ErrHeld, an SQS FIFO group) is
// retried like a capacity error, but the target never asked to slow down:
// the route's concurrency limit stays.
func TestGroup_AHeldRecordDoesNotHalveTheLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		recs, _ := records(2, nil)
		first := recs[0].Envelope.ID
		snd := newScriptSender(10, func(_ context.Context, e *message.Envelope, n int) error {
			switch {
			case n > 1:
				return nil
			case e.ID == first:
				return errors.New("InternalError")
			}
			return senders.Capacity(fmt.Errorf("%w: group g", senders.ErrHeld), 0)
		})
		j := newJournal()
		g, w, store := newGroup(t, testOptions(t, snd, testPolicy(), j))
		w.append(recs...)
		stop := running(t, g)
		eventually(t, time.Minute, "delivered", func() bool { return live(t, store) == 0 })
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		if ls := j.limits["r"]; slices.Min(ls) < ls[0] {
			t.Errorf("limits %v: a held record halved the limit", ls)
		}
	})
}
