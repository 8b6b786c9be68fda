package sqlite_test

import (
	"flag"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/gobridge/gobridge/stores/sqlite"
	"github.com/gobridge/gobridge/stores/storetest"
)

var backlogs = flag.String("backlogs", "10000,100000",
	"comma-separated backlog sizes for BenchmarkStore_ClaimBacklog (add 1000000 for the 1M run)")

func benchStore(b *testing.B, sync string) *sqlite.Store {
	b.Helper()
	s, err := sqlite.Open(filepath.Join(b.TempDir(), "outbox.db"), sqlite.Options{Sync: sync})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	return s
}

func BenchmarkStore_Append(b *testing.B) {
	for _, sync := range []string{"full", "normal"} {
		for _, batch := range []int{1, 100, 1000} {
			b.Run(fmt.Sprintf("sync=%s/batch=%d", sync, batch), func(b *testing.B) {
				storetest.BenchAppend(b, benchStore(b, sync), batch)
			})
		}
	}
}

func BenchmarkStore_ClaimComplete(b *testing.B) {
	b.Run("sqlite", func(b *testing.B) {
		storetest.BenchClaimComplete(b, benchStore(b, "full"), 100)
	})
}

func BenchmarkStore_ClaimBacklog(b *testing.B) {
	for _, f := range strings.Split(*backlogs, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			b.Fatalf("-backlogs: %v", err)
		}
		b.Run(fmt.Sprintf("sqlite/backlog=%d", n), func(b *testing.B) {
			storetest.BenchClaimBacklog(b, benchStore(b, "full"), n, 100)
		})
	}
}
