package dynamodb_test

import (
	"strconv"
	"testing"

	"github.com/gobridge/gobridge/stores/storetest"
)

// The benchmarks run against DynamoDB Local: its speed says little about
// DynamoDB's, so they also report round trips per record ("req/rec"),
// which is what an operator pays for. Run them with a fixed count:
//
//	go test -run XXX -bench . -benchtime 20x ./stores/dynamodb/

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

func BenchmarkStore_ClaimComplete(b *testing.B) {
	for _, batch := range []int{10, 100} {
		b.Run("batch="+strconv.Itoa(batch), func(b *testing.B) {
			var cnt counter
			s := open(b, &cnt)
			storetest.BenchClaimComplete(b, s, 100, batch)
			b.ReportMetric(0, "req/rec") // the fill is counted too: see BenchmarkStore_Write
		})
	}
}
