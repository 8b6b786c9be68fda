package dynamodb_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gobridge/gobridge/message"
	"github.com/gobridge/gobridge/stores"
	"github.com/gobridge/gobridge/stores/dynamodb"
)

// Instances appending the same coalesce keys at once, while the owner
// claims and delivers: at most one unclaimed record per key is left, the
// newest message of each key is never lost, and the live count agrees.
func TestWrite_CoalescingAcrossInstances(t *testing.T) {
	t.Parallel()
	const instances, batches, parts = 3, 12, 2
	session := uniqueName("coalesce-")
	var recv atomic.Int64 // ReceivedAt, increasing across instances
	var mu sync.Mutex
	newest := map[string]string{} // coalesce key → ID of its newest message
	claimed := map[string]bool{}
	ins := make([]*dynamodb.Store, instances)
	for i := range ins {
		// One transaction attempt in seven never reaches DynamoDB, as under
		// load: the retry of the Write after its refusal runs every time.
		ins[i] = open(t, &counter{drop: 7}, fastRetries)
	}
	var done atomic.Bool
	var wg, owner sync.WaitGroup
	for i, s := range ins {
		wg.Go(func() {
			for j := range batches {
				var b stores.Batch
				for k := range 4 {
					ck := []string{"a", "b", "c"}[(i+j+k)%3]
					mu.Lock()
					r := stores.Record{Session: session, Route: "r", Partition: k % parts, CoalesceKey: ck,
						Envelope: message.Envelope{ID: message.NewID(), ReceivedAt: t0.Add(time.Duration(recv.Add(1)))}}
					newest[ck] = r.Envelope.ID
					mu.Unlock()
					b.Append = append(b.Append, r)
				}
				if err := writeRetrying(t, s, &b); err != nil {
					t.Errorf("Write: %v", err)
					return
				}
			}
		})
	}
	// The owner of both partitions claims and delivers meanwhile.
	o := open(t, nil)
	leases := make([]stores.Lease, parts)
	for p := range parts {
		le, err := o.Acquire(t.Context(), stores.PartitionLease(session, p), "owner", time.Hour, t0)
		if err != nil {
			t.Fatal(err)
		}
		leases[p] = le
	}
	claim := func(p int) []stores.Record {
		// As the drainer does: after a failed Claim, claim again under the
		// same token (the store returns what the failed one took).
		for fails := 0; ; fails++ {
			got, err := o.Claim(context.Background(), stores.ClaimRequest{Session: session, Partition: p, Token: leases[p].Token, Limit: 50})
			if err == nil || fails == maxFails {
				if err != nil {
					t.Errorf("Claim: %v", err)
				}
				return got
			}
			t.Logf("claim failed, claiming again: %v", err)
		}
	}
	owner.Go(func() {
		for !done.Load() {
			for p := range parts {
				var b stores.Batch
				for _, r := range claim(p) {
					mu.Lock()
					claimed[r.Envelope.ID] = true
					mu.Unlock()
					b.Settle = append(b.Settle, stores.Settlement{Key: r.Key(), Token: leases[p].Token, Outcome: stores.Done})
				}
				if err := writeRetrying(t, o, &b); err != nil {
					t.Errorf("settle: %v", err)
				}
			}
		}
	})
	wg.Wait()
	done.Store(true)
	owner.Wait()
	left := map[string][]string{}
	n := 0
	for p := range parts {
		for _, r := range claim(p) {
			left[r.CoalesceKey] = append(left[r.CoalesceKey], r.Envelope.ID)
			n++
		}
	}
	for ck, id := range newest {
		if len(left[ck]) > 1 {
			t.Errorf("key %s: %d unclaimed records left, want at most 1", ck, len(left[ck]))
		}
		if !claimed[id] && (len(left[ck]) != 1 || left[ck][0] != id) {
			t.Errorf("key %s: its newest message %s was lost (left %v)", ck, id, left[ck])
		}
	}
	st, err := o.Stats(t.Context())
	for _, s := range st {
		if s.Session == session && s.Live != n {
			t.Errorf("stats: %d live, want %d", s.Live, n)
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d claimed meanwhile, %d left", len(claimed), n)
}

// writeRetrying commits b as the bridge's writer does: a failed Write is
// retried with the same Batch, which then reports what a failed attempt
// stored (or may have) as stored by it (see stores.Batch). Under load a
// transaction attempt can end without DynamoDB's answer and its retry be
// refused because another instance committed meanwhile: the Write cannot
// know whether the first attempt applied, and fails.
func writeRetrying(t *testing.T, s *dynamodb.Store, b *stores.Batch) error {
	for fails := 0; ; fails++ {
		err := s.Write(context.Background(), b)
		if err == nil || fails == maxFails {
			return err
		}
		t.Logf("write failed, writing the batch again: %v", err)
	}
}

// A process must not plan a new record on the place of a record the same
// Write settles (DynamoDB refuses two operations on one item in one
// transaction, which would make a good batch ErrInvalid): here b's clock
// runs ahead, and a's view of the counter is just below b's record.
func TestWrite_NoNewRecordOnASettledOne(t *testing.T) {
	t.Parallel()
	a, b := open(t, nil), open(t, nil)
	ctx := t.Context()
	session := uniqueName("stale-")
	rec := func() stores.Record {
		return stores.Record{Session: session, Route: "r", Envelope: message.Envelope{ID: message.NewID()}}
	}
	ahead := time.Now().Add(time.Hour).UnixMicro()
	dynamodb.SetCounter(b, session, 0, ahead)
	w := stores.Batch{Append: []stores.Record{rec()}}
	if err := b.Write(ctx, &w); err != nil {
		t.Fatal(err)
	}
	le, err := a.Acquire(ctx, stores.PartitionLease(session, 0), "a", time.Hour, t0)
	if err != nil {
		t.Fatal(err)
	}
	got, err := a.Claim(ctx, stores.ClaimRequest{Session: session, Token: le.Token, Limit: 10})
	if err != nil || len(got) != 1 {
		t.Fatalf("Claim = %d, %v", len(got), err)
	}
	dynamodb.SetCounter(a, session, 0, ahead) // its next Seq would be b's record's
	w = stores.Batch{
		Settle: []stores.Settlement{{Key: got[0].Key(), Token: le.Token, Outcome: stores.Done}},
		Append: []stores.Record{rec()},
	}
	if err := a.Write(ctx, &w); err != nil {
		t.Fatalf("Write: %v", err)
	}
	if w.Settle[0].Stale || w.Append[0].Seq <= got[0].Seq {
		t.Errorf("stale %v, new seq %d after %d", w.Settle[0].Stale, w.Append[0].Seq, got[0].Seq)
	}
}

// A record committed after the owner claimed past the place its appender
// first planned for it still comes after everything the owner holds: Seq
// is commit order within a partition, so a claim from After misses
// nothing and the appender's order holds.
func TestClaim_AfterMissesNoLateCommit(t *testing.T) {
	t.Parallel()
	slow := &counter{hold: make(chan struct{})}
	a, b, owner := open(t, slow), open(t, nil), open(t, nil)
	ctx := t.Context()
	session := uniqueName("late-")
	rec := func(key string) stores.Record {
		return stores.Record{Session: session, Route: "r", Envelope: message.Envelope{ID: message.NewID(), Key: key}}
	}
	write := func(s *dynamodb.Store, r stores.Record) stores.Record {
		w := stores.Batch{Append: []stores.Record{r}}
		if err := s.Write(ctx, &w); err != nil {
			t.Errorf("Write: %v", err)
		}
		return w.Append[0]
	}
	first := rec("k")
	var late stores.Record
	var wg sync.WaitGroup
	wg.Go(func() { late = write(a, first) })
	<-slow.hold // a's transaction is planned and on its way
	other := write(b, rec("other"))
	le, err := owner.Acquire(ctx, stores.PartitionLease(session, 0), "o", time.Hour, t0)
	if err != nil {
		t.Fatal(err)
	}
	got, err := owner.Claim(ctx, stores.ClaimRequest{Session: session, Token: le.Token, Limit: 10})
	if err != nil || len(got) != 1 || got[0].Envelope.ID != other.Envelope.ID {
		t.Fatalf("first claim = %v, %v; want b's record alone", got, err)
	}
	<-slow.hold // a's transaction goes on
	wg.Wait()
	second := write(a, rec("k"))
	got, err = owner.Claim(ctx, stores.ClaimRequest{Session: session, Token: le.Token, Limit: 10, After: got[0].Seq})
	if err != nil || len(got) != 2 || got[0].Envelope.ID != first.Envelope.ID || got[1].Envelope.ID != second.Envelope.ID {
		t.Fatalf("claim after b's record = %v, %v; want a's two records of key k, in order (seqs %d, %d after %d)",
			got, err, late.Seq, second.Seq, other.Seq)
	}
}
