package dynamodb_test

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/gobridge/gobridge/stores"
)

// The benchmarks report requests per record (the number of DynamoDB round
// trips), which is what an operator pays for; DynamoDB Local's speed says
// little about DynamoDB's. Run them with a fixed count, e.g.
//
//	go test -run XXX -bench . -benchtime 20x ./stores/dynamodb/

func BenchmarkStore_Append(b *testing.B) {
	for _, batch := range []int{1, 25, 99, 100} {
		b.Run("batch="+strconv.Itoa(batch), func(b *testing.B) {
			bu := setup(b)
			batches := make([][]stores.Record, b.N)
			for i := range batches {
				batches[i] = bu.recs(batch, "")
			}
			before := bu.cnt.n.Load()
			b.ResetTimer()
			for i := range b.N {
				if err := bu.s.Append(b.Context(), batches[i]...); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			report(b, bu.cnt.n.Load()-before, b.N*batch)
		})
	}
}

func BenchmarkStore_ClaimComplete(b *testing.B) {
	for _, keyed := range []bool{false, true} {
		for _, batch := range []int{1, 10, 100} {
			name := fmt.Sprintf("keys=%v/batch=%d", keyed, batch)
			b.Run(name, func(b *testing.B) {
				bu := setup(b)
				var all []stores.Record
				for i := range b.N * batch {
					key := ""
					if keyed {
						key = "device-" + strconv.Itoa(i%50)
					}
					all = append(all, bu.recs(1, key)...)
				}
				bu.append(b, all)
				before := bu.cnt.n.Load()
				claimed := 0
				b.ResetTimer()
				for range b.N {
					got, err := bu.s.Claim(b.Context(), stores.ClaimRequest{
						Session: bu.session, Token: 1, Limit: batch, Now: t0, Until: t0.Add(time.Hour),
					})
					if err != nil {
						b.Fatal(err)
					}
					if err := bu.s.Complete(b.Context(), got...); err != nil {
						b.Fatal(err)
					}
					claimed += len(got)
				}
				b.StopTimer()
				if claimed != b.N*batch {
					b.Fatalf("claimed %d records, want %d", claimed, b.N*batch)
				}
				report(b, bu.cnt.n.Load()-before, claimed)
			})
		}
	}
}

func report(b *testing.B, requests int64, records int) {
	b.ReportMetric(float64(requests)/float64(records), "requests/record")
	b.ReportMetric(float64(records)/float64(requests), "records/request")
	b.ReportMetric(0, "ns/op")
}
