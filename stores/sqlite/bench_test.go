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
	"comma-separated backlog sizes for BenchmarkStore_ClaimComplete (add 1000000 for the 1M run)")

func benchStore(b *testing.B, sync string) *sqlite.Store {
	b.Helper()
	s, err := sqlite.Open(filepath.Join(b.TempDir(), "outbox.db"), sqlite.Options{Sync: sync})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	return s
}

// BenchmarkStore_Write is the engine's hot path: one Write of 256 claimed
// appends plus the 256 Done settlements of the previous Write.
func BenchmarkStore_Write(b *testing.B) {
	for _, sync := range []string{"full", "normal"} {
		b.Run("sync="+sync, func(b *testing.B) {
			storetest.BenchWrite(b, benchStore(b, sync), 256)
		})
	}
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

// BenchmarkStore_ClaimComplete claims 256 records of a backlog and
// completes them in the next Write, with -backlogs records queued behind.
func BenchmarkStore_ClaimComplete(b *testing.B) {
	for f := range strings.SplitSeq(*backlogs, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			b.Fatalf("-backlogs: %v", err)
		}
		b.Run(fmt.Sprintf("backlog=%d", n), func(b *testing.B) {
			storetest.BenchClaimComplete(b, benchStore(b, "full"), n, 256)
		})
	}
}
