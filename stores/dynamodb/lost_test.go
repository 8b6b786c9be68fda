package dynamodb_test

import (
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awsddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/gobridge/gobridge/message"
	"github.com/gobridge/gobridge/stores"
	"github.com/gobridge/gobridge/stores/dynamodb"
)

// notRetryingLostAnswers gives the client the SDK's standard retries, but
// none of an answer the test lost (errLost).
func notRetryingLostAnswers(o *awsddb.Options) {
	o.Retryer = retry.NewStandard(func(so *retry.StandardOptions) {
		lost := retry.IsErrorRetryableFunc(func(err error) aws.Ternary {
			if errors.Is(err, errLost) {
				return aws.FalseTernary
			}
			return aws.UnknownTernary
		})
		so.Retryables = append([]retry.IsErrorRetryable{lost}, so.Retryables...)
	})
}

// A transaction of a Write reaches DynamoDB and applies, but its answer is
// lost (the connection drops after the request was sent, the SDK's retries
// too), so the Write fails and the engine retries the same Batch. The
// retry must report what the lost transaction did as done: its appends
// stored, with their Seq and token (the owner's drainer must hold them:
// reported as duplicates, claimed under the lease, they stalled until the
// lease changed hands), its settlements applied (not Stale). Found by
// review; see Atomicity in the package doc.
func TestWrite_RetryAfterLostAnswer(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		appends int   // records appended claimed under the lease
		mixed   bool  // also settles three held records and replaces a waiting coalesced one
		lose    int64 // the transaction of the Write whose answer is lost (1: its first)
		unsent  bool  // the request is lost before it reaches DynamoDB
		twice   bool  // the first retry loses its answer too (it re-applies the Retry)
	}{
		{name: "appends in one transaction", appends: 10, lose: 1},
		{name: "second of two transactions", appends: 60, lose: 2}, // about 45 fit one
		{name: "settlements, appends and a coalesced record", appends: 10, mixed: true, lose: 1},
		{name: "lost twice", appends: 10, mixed: true, lose: 1, twice: true},
		{name: "request lost before DynamoDB", appends: 10, mixed: true, lose: 1, unsent: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			cnt := &counter{}
			// Every attempt loses its answer: the SDK does not retry a lost
			// answer here (its retries, which DynamoDB answers as the first
			// since they carry its ClientRequestToken, would lose theirs
			// too), so each Write loses exactly one. It keeps its retries of
			// everything else, as the store has them: DynamoDB Local answers
			// 500 ("too long waiting for a lock") when it is busy.
			client := newClient(t, cnt, notRetryingLostAnswers)
			// A connection a request: a keep-alive connection DynamoDB Local
			// closed while idle would fail a call with a lost answer too.
			cnt.next = &http.Transport{DisableKeepAlives: true}
			s, err := dynamodb.Open(ctx, dynamodb.Options{Table: sharedTable(t), Client: client})
			if err != nil {
				t.Fatal(err)
			}
			a := uniqueName("lost-")
			le, err := s.Acquire(ctx, stores.PartitionLease(a, 0), "o1", time.Minute, time.Now())
			if err != nil {
				t.Fatal(err)
			}
			rec := func(token int64, ck string, at time.Time) stores.Record {
				return stores.Record{Session: a, Route: "r", Token: token, CoalesceKey: ck,
					Envelope: message.Envelope{ID: message.NewID(), Topic: "t", Payload: []byte("x"), ReceivedAt: at}}
			}
			var batch stores.Batch
			var h []stores.Record // held records the batch settles
			dead := 0
			if tc.mixed {
				// Three held records, and one waiting unclaimed that the
				// batch's newer record of its coalesce key replaces.
				pre := stores.Batch{Append: []stores.Record{rec(le.Token, "", t0), rec(le.Token, "", t0), rec(le.Token, "", t0), rec(0, "k", t0)}}
				if err := s.Write(ctx, &pre); err != nil {
					t.Fatal(err)
				}
				h, dead = pre.Append, 1
				batch.Settle = []stores.Settlement{
					// an outcome of h[0] under another claim's token: stale,
					// also when the retry finds h[0] settled
					{Key: h[0].Key(), Token: le.Token + 1000, Outcome: stores.Done},
					{Key: h[0].Key(), Token: le.Token, Outcome: stores.Done},
					{Key: h[1].Key(), Token: le.Token, Outcome: stores.DeadLetter, Reason: "refused", Attempts: 1},
					{Key: h[2].Key(), Token: le.Token, Outcome: stores.Retry, Reason: "later", Attempts: 1},
				}
				batch.Append = append(batch.Append, rec(0, "k", t0.Add(time.Second)))
			}
			for range tc.appends {
				batch.Append = append(batch.Append, rec(le.Token, "", t0))
			}

			cnt.unsent.Store(tc.unsent)
			loses := []int64{tc.lose}
			if tc.twice {
				loses = append(loses, 1)
			}
			for i, lose := range loses {
				cnt.lose.Store(lose)
				err = s.Write(ctx, &batch)
				cnt.lose.Store(0)
				if !errors.Is(err, errLost) || cnt.lost.Load() != int64(i+1) {
					t.Fatalf("Write %d = %v after %d lost answers; want it to fail with its transaction's answer lost", i, err, cnt.lost.Load())
				}
			}
			if err := s.Write(ctx, &batch); err != nil {
				t.Fatalf("retried Write: %v", err)
			}
			want := map[string]int64{} // the live records (not the replaced one): ID → the Seq reported
			for i, r := range batch.Append {
				wantToken := le.Token
				if r.CoalesceKey != "" {
					wantToken = 0
				}
				if r.Seq == 0 || r.Token != wantToken {
					t.Errorf("record %d after the retry: Seq %d, Token %d; want it stored with its Seq, Token %d", i, r.Seq, r.Token, wantToken)
				}
				want[r.Envelope.ID] = r.Seq
			}
			for i, st := range batch.Settle {
				if old := tc.mixed && i == 0; st.Stale != old {
					t.Errorf("settlement %v of %s under another token %v after the retry: Stale %v", st.Outcome, st.ID, old, st.Stale)
				}
			}
			if tc.mixed {
				want[h[2].Envelope.ID] = h[2].Seq // retried: still live
			}

			// The table holds each record once, at the Seq reported, and
			// counts it once; the settlements took effect once.
			stats, err := s.Stats(ctx)
			if err != nil {
				t.Fatal(err)
			}
			var ss stores.SessionStats
			for _, ss = range stats {
				if ss.Session == a {
					break
				}
			}
			if ss.Session != a || ss.Live != len(want) || ss.Routes["r"].Dead != dead {
				t.Errorf("Stats of the session = %+v; want %d live, %d dead", ss, len(want), dead)
			}
			if err := s.Release(ctx, le); err != nil {
				t.Fatal(err)
			}
			le2, err := s.Acquire(ctx, stores.PartitionLease(a, 0), "o2", time.Minute, time.Now())
			if err != nil {
				t.Fatal(err)
			}
			got, err := s.Claim(ctx, stores.ClaimRequest{Session: a, Token: le2.Token, Limit: 1000})
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range got {
				seq, ok := want[r.Envelope.ID]
				switch {
				case !ok:
					t.Errorf("the next owner claims %s (Seq %d): not a live record (or twice)", r.Envelope.ID, r.Seq)
				case r.Seq != seq:
					t.Errorf("record %s stored at Seq %d, reported at %d", r.Envelope.ID, r.Seq, seq)
				case tc.mixed && r.Envelope.ID == h[2].Envelope.ID && r.Attempts != 1:
					t.Errorf("retried record has %d attempts, want 1", r.Attempts)
				}
				delete(want, r.Envelope.ID)
			}
			if len(want) > 0 {
				t.Errorf("the next owner claims %d records; %d reported live are missing", len(got), len(want))
			}
			if tc.mixed {
				if dead, _, err := s.Dead(ctx, stores.DeadQuery{ID: h[1].Envelope.ID}); err != nil || len(dead) != 1 {
					t.Errorf("dead letters of the record dead-lettered: %d, %v; want 1", len(dead), err)
				}
			}

			// Once retried, the batch is done: appending it again is a
			// duplicate, its settlements are stale.
			if err := s.Write(ctx, &batch); err != nil {
				t.Fatal(err)
			}
			for i, r := range batch.Append {
				if r.Seq != 0 {
					t.Errorf("record %d appended a third time: Seq %d, want 0 (a duplicate)", i, r.Seq)
				}
			}
			for _, st := range batch.Settle {
				if !st.Stale {
					t.Errorf("settlement %v of %s written a third time: not Stale", st.Outcome, st.ID)
				}
			}
		})
	}
}
