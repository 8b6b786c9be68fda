package dynamodb_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awsddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/gobridge/gobridge/message"
	"github.com/gobridge/gobridge/stores"
	"github.com/gobridge/gobridge/stores/dynamodb"
)

// fastRetries keeps the SDK's retries (3 attempts) without their backoff
// of up to seconds, so that the tests of faults that outlast them run fast.
func fastRetries(o *awsddb.Options) {
	o.Retryer = retry.NewStandard(func(so *retry.StandardOptions) {
		so.MaxAttempts, so.RateLimiter = 3, ratelimit.None
		so.Backoff = retry.BackoffDelayerFunc(func(int, error) (time.Duration, error) { return time.Millisecond, nil })
	})
}

// appendHeld appends n records to a new session's partition 0, claimed
// under a lease that s takes for them.
func appendHeld(t *testing.T, s *dynamodb.Store, prefix string, n int) (stores.Lease, []stores.Record) {
	t.Helper()
	session := uniqueName(prefix)
	le, err := s.Acquire(t.Context(), stores.PartitionLease(session, 0), "o1", time.Minute, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	var recs []stores.Record
	for range n {
		recs = append(recs, stores.Record{Session: session, Route: "r", Token: le.Token,
			Envelope: message.Envelope{ID: message.NewID(), Topic: "t", Payload: []byte("x")}})
	}
	return le, recs
}

// The answer of a Write's transaction is lost after DynamoDB applied it
// (the connection resets), and the SDK's retries of it are throttled
// (or find it still in progress) until they run out: the last answer is a
// 400, but the first attempt committed. The engine retries the Batch; its
// records must come back stored and held, not as duplicates (which would
// leave them claimed under the owner's token, which its claims skip, until
// the lease changed hands).
func TestFaults_WriteLostThenThrottled(t *testing.T) {
	t.Parallel()
	for _, then := range []*fault{throttled, provisioned, limitExceeded, inProgress} {
		t.Run(then.typ, func(t *testing.T) {
			t.Parallel()
			p := newProxy(t)
			s := p.open(t, fastRetries)
			le, recs := appendHeld(t, s, "lostthrottled-", 5)
			b := stores.Batch{Append: recs}
			p.set(func(op string, n int) *fault {
				switch {
				case op != "TransactWriteItems":
					return nil
				case n == 1:
					return &fault{reset: true}
				}
				return then
			})
			if err := s.Write(t.Context(), &b); err == nil {
				t.Fatal("Write succeeded through a lost answer and throttled retries")
			}
			p.set(nil)
			if err := s.Write(t.Context(), &b); err != nil {
				t.Fatalf("retried Write: %v", err)
			}
			for i, r := range b.Append {
				if r.Seq == 0 || r.Token != le.Token {
					t.Errorf("record %d after the retry: Seq %d, Token %d; want it stored, held under %d", i, r.Seq, r.Token, le.Token)
				}
			}
		})
	}
}

// A Write's transaction attempt fails without DynamoDB's answer (here a
// 500; a reset keep-alive connection does the same) and, before the SDK
// sends it again, another instance appends to the same partition: the
// second attempt is refused (ConditionalCheckFailed on the partition
// counter). The Write cannot know whether the first attempt applied, so it
// fails with that refusal: the flake of
// TestWrite_PerKeyOrderAcrossInstancesAndTakeovers under load. The engine
// retries the same Batch, which must append every record once, claimed,
// after the other instance's (no stall, no loss, no duplicate).
func TestFaults_WriteLostThenRefused(t *testing.T) {
	t.Parallel()
	p := newProxy(t)
	s, other := p.open(t, fastRetries), open(t, nil)
	le, recs := appendHeld(t, s, "lostrefused-", 3)
	b := stores.Batch{Append: recs}
	var between stores.Batch
	p.set(func(op string, n int) *fault {
		if op != "TransactWriteItems" || n != 1 {
			return nil
		}
		between.Append = []stores.Record{{Session: recs[0].Session, Route: "r",
			Envelope: message.Envelope{ID: message.NewID(), Topic: "t", Payload: []byte("x")}}}
		// Its counter is ahead of s's (a clock ahead): its Seq is above
		// what s planned.
		dynamodb.SetCounter(other, recs[0].Session, 0, time.Now().Add(time.Hour).UnixMicro())
		if err := other.Write(context.Background(), &between); err != nil {
			t.Errorf("the other instance's Write: %v", err)
		}
		return internal
	})
	err := s.Write(t.Context(), &b)
	var tce *types.TransactionCanceledException
	if !errors.As(err, &tce) || p.calls("TransactWriteItems") != 2 {
		t.Fatalf("Write = %v after %d attempts; want the second attempt's cancellation", err, p.calls("TransactWriteItems"))
	}
	p.set(nil)
	if err := s.Write(t.Context(), &b); err != nil {
		t.Fatalf("retried Write: %v", err)
	}
	for i, r := range b.Append {
		if r.Seq <= between.Append[0].Seq || r.Token != le.Token {
			t.Errorf("record %d after the retry: Seq %d, Token %d; want it stored after Seq %d, held under %d",
				i, r.Seq, r.Token, between.Append[0].Seq, le.Token)
		}
	}
	got, err := s.Claim(t.Context(), stores.ClaimRequest{Session: recs[0].Session, Token: le.Token, Limit: 100})
	if err != nil || len(got) != 1 || got[0].Envelope.ID != between.Append[0].Envelope.ID {
		t.Errorf("Claim = %d records, %v; want only the other instance's record (s holds its own)", len(got), err)
	}
}

// claimAll claims the partition of le under its token, as the drainer
// does (the records of a Claim that fails are ignored), until a Claim
// returns nothing, and returns the IDs claimed.
func claimAll(t *testing.T, s *dynamodb.Store, le stores.Lease, session string, limit int) map[string]bool {
	t.Helper()
	got := map[string]bool{}
	for range 50 {
		recs, err := s.Claim(t.Context(), stores.ClaimRequest{Session: session, Token: le.Token, Limit: limit})
		if err != nil {
			t.Logf("Claim: %v", err)
			continue
		}
		if len(recs) == 0 {
			return got
		}
		for _, r := range recs {
			if got[r.Envelope.ID] {
				t.Errorf("record %s claimed twice under one token", r.Envelope.ID)
			}
			got[r.Envelope.ID] = true
		}
	}
	t.Fatal("Claim keeps returning records")
	return nil
}

// A Claim of the default batch (100 records: two transactions) whose
// second transaction is throttled, or whose answer is lost (applied, or
// perhaps), fails; the owner ignores what a failed Claim returns and
// claims again under the same token. Every record must reach it: one
// claimed under its token but not returned is skipped by its later claims
// (they take what it does not hold), claimed by nobody until the lease
// changes hands.
func TestFaults_ClaimFailsMidway(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		f    *fault
		at   int // the take transaction it hits
	}{
		{"second take throttled", throttled, 2},
		{"second take cancelled by throttling", cancelled("None", "ThrottlingError"), 2},
		{"first take answer lost", &fault{reset: true}, 1},
		{"first take answer lost, retries throttled", &fault{reset: true}, -1},
		{"second take answer lost", &fault{reset: true}, 2},
		{"second take server error", internal, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := newProxy(t)
			s := p.open(t, fastRetries)
			le, recs := appendHeld(t, s, "claimfault-", 100)
			for i := range recs {
				recs[i].Token = 0 // unclaimed: for the owner to claim
			}
			if err := s.Write(t.Context(), &stores.Batch{Append: recs}); err != nil {
				t.Fatal(err)
			}
			p.set(func(op string, n int) *fault {
				switch {
				case op != "TransactWriteItems":
					return nil
				case tc.at == -1 && n == 1:
					return tc.f
				case tc.at == -1:
					return throttled
				case n == tc.at || n > tc.at && !tc.f.reset: // the SDK's retries too
					return tc.f
				}
				return nil
			})
			got := map[string]bool{}
			// What the faulted Claim returned without an error, the owner
			// holds; then it claims again.
			first, err := s.Claim(t.Context(), stores.ClaimRequest{Session: recs[0].Session, Token: le.Token, Limit: 100})
			if err == nil {
				for _, r := range first {
					got[r.Envelope.ID] = true
				}
			}
			p.set(nil)
			for id := range claimAll(t, s, le, recs[0].Session, 100) {
				if got[id] {
					t.Errorf("record %s returned by the faulted Claim and again", id)
				}
				got[id] = true
			}
			if len(got) != len(recs) {
				t.Errorf("the owner got %d of %d records (the faulted Claim: %d, %v); the rest are claimed by nobody",
					len(got), len(recs), len(first), err)
			}
		})
	}
}

// A BatchGetItem that a throttled table answers with every key
// unprocessed is retried a bounded number of times, then the Write fails
// (and the writer's retries, with their backoff and /readyz, take over),
// rather than looping inside the Write for as long as the table is
// throttled.
func TestFaults_UnprocessedKeysBounded(t *testing.T) {
	t.Parallel()
	p := newProxy(t)
	s := p.open(t, fastRetries)
	le, recs := appendHeld(t, s, "unprocessed-", 1)
	if err := s.Write(t.Context(), &stores.Batch{Append: recs}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	const giveUp = 200
	p.set(func(op string, n int) *fault {
		if op != "BatchGetItem" {
			return nil
		}
		if n == giveUp {
			cancel()
		}
		return &fault{unprocessed: true}
	})
	b := stores.Batch{Settle: []stores.Settlement{{Key: recs[0].Key(), Token: le.Token, Outcome: stores.Done}}}
	err := s.Write(ctx, &b)
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, stores.ErrInvalid) {
		t.Fatalf("Write against a table that leaves every key unprocessed = %v after %d reads; want it to give up by itself, not as invalid",
			err, p.calls("BatchGetItem"))
	}
}

// A table that cancels every transaction for throttled items is not
// hammered: the Write gives up after a few attempts (the writer's backoff
// then paces its retries) and the failure is not taken for an invalid
// record, which the writer would bisect and dead-letter.
func TestFaults_ThrottledTransactionsBounded(t *testing.T) {
	t.Parallel()
	for _, code := range []string{"ThrottlingError", "ProvisionedThroughputExceeded"} {
		t.Run(code, func(t *testing.T) {
			t.Parallel()
			p := newProxy(t)
			s := p.open(t, fastRetries)
			_, recs := appendHeld(t, s, "throttledtx-", 3)
			p.set(func(op string, n int) *fault {
				if op == "TransactWriteItems" {
					return cancelled("None", code)
				}
				return nil
			})
			b := stores.Batch{Append: recs}
			err := s.Write(t.Context(), &b)
			if err == nil || errors.Is(err, stores.ErrInvalid) {
				t.Fatalf("Write against a throttled table = %v; want a transient failure", err)
			}
			if n := p.calls("TransactWriteItems"); n > 5 {
				t.Errorf("Write sent %d transactions to a throttled table before giving up; want a few", n)
			}
			p.set(nil)
			if err := s.Write(t.Context(), &b); err != nil || b.Append[0].Seq == 0 {
				t.Fatalf("Write once the throttling ended: %v, Seq %d", err, b.Append[0].Seq)
			}
		})
	}
}
