package dynamodb_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/gobridge/gobridge/stores"
	"github.com/gobridge/gobridge/stores/storetest"
)

// The benchmarks run against DynamoDB Local: its speed says little about
// DynamoDB's, so they also report round trips per record ("req/rec"),
// which is what an operator pays for. Run them with a fixed count:
//
//	go test -run XXX -bench . -benchtime 50x ./stores/dynamodb/

func BenchmarkStore_Write(b *testing.B) {
	for _, batch := range []int{1, 25, 100} {
		b.Run("batch="+strconv.Itoa(batch), func(b *testing.B) {
			var cnt counter
			s := open(b, &cnt)
			before := cnt.n.Load()
			storetest.BenchAppend(b, s, batch)
			b.ReportMetric(float64(cnt.n.Load()-before)/float64(b.N*batch), "req/rec")
		})
	}
}

// BenchmarkStore_ClaimComplete claims batch records of a backlog and
// settles them Done in the next Write; one op is one Claim and one Write.
func BenchmarkStore_ClaimComplete(b *testing.B) {
	for _, batch := range []int{10, 100} {
		b.Run("batch="+strconv.Itoa(batch), func(b *testing.B) {
			var cnt counter
			s := open(b, &cnt)
			session := uniqueName("bench-")
			storetest.Fill(b, s, session, b.N*batch+100)
			ctx := context.Background()
			le, err := s.Acquire(ctx, stores.PartitionLease(session, 0), "bench", time.Hour, time.Now())
			if err != nil {
				b.Fatal(err)
			}
			before := cnt.n.Load()
			var after int64
			b.ResetTimer()
			for range b.N {
				got, err := s.Claim(ctx, stores.ClaimRequest{Session: session, Token: le.Token, Limit: batch, After: after})
				if err != nil || len(got) != batch {
					b.Fatalf("claim: %d records, %v", len(got), err)
				}
				after = got[len(got)-1].Seq
				w := stores.Batch{Settle: make([]stores.Settlement, len(got))}
				for i, r := range got {
					w.Settle[i] = stores.Settlement{Key: r.Key(), Token: le.Token, Outcome: stores.Done}
				}
				if err := s.Write(ctx, &w); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "rec/s")
			b.ReportMetric(float64(cnt.n.Load()-before)/float64(b.N*batch), "req/rec")
		})
	}
}
