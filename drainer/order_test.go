package drainer

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gobridge/gobridge/message"
	"github.com/gobridge/gobridge/stores"
)

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
		release := make(chan struct{})
		snd := newScriptSender(1, func(ctx context.Context, e *message.Envelope, _ int) error {
			if e.Key == "a" { // keeps the window full until released
				select {
				case <-release:
				case <-ctx.Done():
				}
			}
			return nil
		})
		opts := testOptions(t, snd, testPolicy(), nil)
		opts.Window, opts.BatchSize = 4, 4
		g, w, store := newGroup(t, opts)
		stop := running(t, g)
		waitCaughtUp(t, g)
		held, _ := records(2, func(int) string { return "a" })
		held[0].Envelope.ID, held[1].Envelope.ID = "a0", "a1"
		w.append(held...) // hot, sent, and the sends block
		synctest.Wait()

		// The writer's next batch: room for two, then the window is full.
		batch, _ := records(4, func(int) string { return "k" })
		tokens := make([]int64, len(batch))
		for i := range batch {
			tokens[i] = g.Reserve(0)
			batch[i].Token = tokens[i]
		}
		if tokens[0] == 0 || tokens[1] == 0 || tokens[2] != 0 || tokens[3] != 0 {
			t.Fatalf("reservations %v, want two tokens then two zeros", tokens)
		}
		b := stores.Batch{Append: batch}
		if err := store.Write(context.Background(), &b); err != nil {
			t.Fatal(err)
		}
		close(release) // room frees up: the drainer claims before Delivered
		synctest.Wait()
		for i := range b.Append {
			g.Delivered(&b.Append[i], tokens[i])
		}
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
		want := []string{"m000", "m001", "m002", "m003"}
		if len(got) != len(want) {
			t.Fatalf("key k sent %v, want %v", got, want)
		}
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("key k sent %v, want %v", got, want)
			}
		}
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
		release := make(chan struct{})
		snd := newScriptSender(1, func(ctx context.Context, e *message.Envelope, _ int) error {
			if e.Key == "a" { // keeps the window full until released
				select {
				case <-release:
				case <-ctx.Done():
				}
			}
			return nil
		})
		opts := testOptions(t, snd, testPolicy(), nil)
		opts.Window, opts.BatchSize = 1, 1
		g, w, store := newGroup(t, opts)
		stop := running(t, g)
		waitCaughtUp(t, g)
		held, _ := records(1, func(int) string { return "a" })
		held[0].Envelope.ID = "a0"
		w.append(held...) // hot, sent, and the send blocks: the window is full
		synctest.Wait()

		batch, _ := records(2, func(int) string { return "k" })
		tokens := []int64{g.Reserve(0), 0}
		if tokens[0] != 0 {
			t.Fatalf("reservation %d with the window full, want 0", tokens[0])
		}
		close(release) // room frees up: the drainer claims while the batch is not committed
		synctest.Wait()
		tokens[1] = g.Reserve(0)
		for i := range batch {
			batch[i].Token = tokens[i]
		}
		b := stores.Batch{Append: batch}
		if err := store.Write(context.Background(), &b); err != nil {
			t.Fatal(err)
		}
		for i := range b.Append {
			g.Delivered(&b.Append[i], tokens[i])
		}
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
		if len(got) != 2 || got[0] != "m000" || got[1] != "m001" {
			t.Fatalf("key k sent %v, want [m000 m001]", got)
		}
	})
}
