package memory_test

import (
	"flag"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/gobridge/gobridge/stores/memory"
	"github.com/gobridge/gobridge/stores/storetest"
)

var backlogs = flag.String("backlogs", "10000,100000,1000000",
	"comma-separated backlog sizes for BenchmarkStore_ClaimBacklog")

func BenchmarkStore_Append(b *testing.B) {
	for _, batch := range []int{1, 100, 1000} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			storetest.BenchAppend(b, memory.New(), batch)
		})
	}
}

func BenchmarkStore_ClaimComplete(b *testing.B) {
	b.Run("memory", func(b *testing.B) {
		storetest.BenchClaimComplete(b, memory.New(), 100)
	})
}

func BenchmarkStore_ClaimBacklog(b *testing.B) {
	for _, f := range strings.Split(*backlogs, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			b.Fatalf("-backlogs: %v", err)
		}
		b.Run(fmt.Sprintf("memory/backlog=%d", n), func(b *testing.B) {
			storetest.BenchClaimBacklog(b, memory.New(), n, 100)
		})
	}
}
