package dynamodb_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gobridge/gobridge/message"
	"github.com/gobridge/gobridge/stores"
)

// Acquire's answer is lost after DynamoDB gave the lease to the caller;
// the SDK's retry of the update then fails its condition (the token is
// no longer below the new one). The caller holds the lease: Acquire must
// say so, not ErrLeaseHeld (under which it would wait, and nobody could
// take the lease until it lapsed).
func TestFaults_AcquireLostAnswer(t *testing.T) {
	t.Parallel()
	p := newProxy(t)
	s := p.open(t, fastRetries)
	name := uniqueName("lease-lost-")
	p.set(func(op string, n int) *fault {
		if op == "UpdateItem" && n == 2 { // 1: the token counter, 2: the lease
			return &fault{reset: true}
		}
		return nil
	})
	le, err := s.Acquire(t.Context(), name, "o1", time.Minute, time.Now())
	if err != nil {
		t.Fatalf("Acquire whose answer was lost: %v; want the lease it took", err)
	}
	p.set(nil)
	if _, err := s.Renew(t.Context(), le, time.Minute, time.Now()); err != nil {
		t.Fatalf("Renew of the lease Acquire returned: %v", err)
	}
	if _, err := s.Acquire(t.Context(), name, "o2", time.Minute, time.Now()); !errors.Is(err, stores.ErrLeaseHeld) {
		t.Fatalf("Acquire by another owner = %v, want ErrLeaseHeld", err)
	}
}

// Renew and Release under throttling, server errors and a lost answer:
// a transient failure is never ErrLeaseLost (the holder keeps its lease
// until its margin), a lost answer that applied is no failure, and a
// lease that was really taken over is ErrLeaseLost.
func TestFaults_RenewRelease(t *testing.T) {
	t.Parallel()
	p := newProxy(t)
	s := p.open(t, fastRetries)
	name := uniqueName("lease-renew-")
	le, err := s.Acquire(t.Context(), name, "o1", time.Minute, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []*fault{throttled, provisioned, limitExceeded, internal, unavailable} {
		p.set(func(op string, _ int) *fault {
			if op == "UpdateItem" {
				return f
			}
			return nil
		})
		if _, err := s.Renew(t.Context(), le, time.Minute, time.Now()); err == nil || errors.Is(err, stores.ErrLeaseLost) {
			t.Errorf("Renew under %s = %v; want a transient error, not ErrLeaseLost", f.typ, err)
		}
		if n := p.calls("UpdateItem"); n > 3 {
			t.Errorf("Renew under %s: %d calls; want the SDK's 3 attempts", f.typ, n)
		}
	}
	p.set(func(op string, n int) *fault {
		if op == "UpdateItem" && n == 1 {
			return &fault{reset: true}
		}
		return nil
	})
	if le, err = s.Renew(t.Context(), le, time.Minute, time.Now()); err != nil {
		t.Fatalf("Renew whose first answer was lost: %v", err)
	}
	p.set(nil)
	if err := s.Release(t.Context(), le); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Renew(t.Context(), le, time.Minute, time.Now()); !errors.Is(err, stores.ErrLeaseLost) {
		t.Fatalf("Renew after Release = %v, want ErrLeaseLost", err)
	}
}

// A Write whose answer comes after its deadline (DynamoDB applied it) and
// is retried with a new context reports its records stored and held; a
// stale token's settlement of them is skipped after the lease moved.
func TestFaults_SlowAnswerAndFencing(t *testing.T) {
	t.Parallel()
	p := newProxy(t)
	s := p.open(t, fastRetries)
	le, recs := appendHeld(t, s, "slow-", 3)
	ctx, cancel := context.WithCancel(t.Context())
	p.set(func(op string, _ int) *fault {
		if op == "TransactWriteItems" {
			return &fault{hang: true, after: cancel} // the deadline passes once it applied
		}
		return nil
	})
	b := stores.Batch{Append: recs}
	if err := s.Write(ctx, &b); err == nil {
		t.Fatal("Write past its deadline succeeded")
	}
	p.set(nil)
	if err := s.Write(t.Context(), &b); err != nil {
		t.Fatal(err)
	}
	for i, r := range b.Append {
		if r.Seq == 0 || r.Token != le.Token {
			t.Fatalf("record %d: Seq %d, Token %d after the retry; want stored, held under %d", i, r.Seq, r.Token, le.Token)
		}
	}
	// The lease lapses to another owner, who claims them; the old owner's
	// settlements are stale, even with their answers lost.
	session := recs[0].Session
	le2, err := s.Acquire(t.Context(), le.Name, "o2", time.Minute, time.Now().Add(2*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if got := claimAll(t, s, le2, session, 10); len(got) != len(recs) {
		t.Fatalf("the new owner claimed %d of %d", len(got), len(recs))
	}
	old := stores.Batch{Settle: []stores.Settlement{{Key: recs[0].Key(), Token: le.Token, Outcome: stores.Done}},
		Append: []stores.Record{{Session: session, Route: "r", Envelope: message.Envelope{ID: message.NewID(), Topic: "t"}}}}
	p.set(func(op string, n int) *fault {
		if op == "TransactWriteItems" && n == 1 {
			return &fault{reset: true}
		}
		return nil
	})
	_ = s.Write(t.Context(), &old)
	p.set(nil)
	if err := s.Write(t.Context(), &old); err != nil || !old.Settle[0].Stale {
		t.Fatalf("stale token's settlement: %v, Stale %v; want it skipped", err, old.Settle[0].Stale)
	}
	if got := claimAll(t, s, le2, session, 10); len(got) != 1 {
		t.Fatalf("the new owner claims %d more records; want the one appended", len(got))
	}
}
