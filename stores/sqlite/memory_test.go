package sqlite_test

import (
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gobridge/gobridge/stores"
	"github.com/gobridge/gobridge/stores/sqlite"
	"github.com/gobridge/gobridge/stores/storetest"
)

// TestStore_MemoryAtAMillion fills a store with GOBRIDGE_SQLITE_BACKLOG
// (default 1,000,000) pending records of 200 bytes, then claims and
// completes them all the engine's way (claims of 256 after the last Seq
// held, a Write of their Done settlements), and logs the process's resident
// memory (RSS, and its peak) at each stage and the time of a Stats call at
// the full backlog. It fails when the peak passes 64 MiB, the product's
// target for a whole bridge with a million pending records. It runs only
// with GOBRIDGE_SQLITE_MEMORY=1 (a few minutes).
func TestStore_MemoryAtAMillion(t *testing.T) {
	if os.Getenv("GOBRIDGE_SQLITE_MEMORY") == "" {
		t.Skip("set GOBRIDGE_SQLITE_MEMORY=1 to run (a few minutes)")
	}
	n := 1_000_000
	if v := os.Getenv("GOBRIDGE_SQLITE_BACKLOG"); v != "" {
		n, _ = strconv.Atoi(v)
	}
	ctx := t.Context()
	s := open(t, filepath.Join(t.TempDir(), "outbox.db"), sqlite.Options{})
	logMem(t, "opened")
	start := time.Now()
	storetest.Fill(t, s, "bench", n)
	logMem(t, "filled in "+time.Since(start).Round(time.Second).String())

	start = time.Now()
	st, err := s.Stats(ctx)
	if err != nil || len(st) != 1 || st[0].Live != n {
		t.Fatalf("Stats = %+v, %v", st, err)
	}
	t.Logf("Stats at %d pending: %v", n, time.Since(start))

	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	s = open(t, s.Path(), sqlite.Options{})
	logMem(t, "reopened (counted the file) in "+time.Since(start).Round(time.Millisecond).String())

	le, err := s.Acquire(ctx, stores.PartitionLease("bench", 0), "o", time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	var after int64
	for done := 0; done < n; {
		got, err := s.Claim(ctx, stores.ClaimRequest{Session: "bench", Token: le.Token, Limit: 256, After: after})
		if err != nil || len(got) == 0 {
			t.Fatalf("Claim after %d: %d records, %v", done, len(got), err)
		}
		after = got[len(got)-1].Seq
		w := stores.Batch{Settle: make([]stores.Settlement, len(got))}
		for i, r := range got {
			w.Settle[i] = stores.Settlement{Key: r.Key(), Token: le.Token, Outcome: stores.Done}
		}
		if err := s.Write(ctx, &w); err != nil {
			t.Fatal(err)
		}
		done += len(got)
		if done%(n/4) < 256 {
			logMem(t, "claimed and completed "+strconv.Itoa(done))
		}
	}
	logMem(t, "drained in "+time.Since(start).Round(time.Second).String())
	if peak := status(t, "VmHWM"); peak > 64<<10 {
		t.Errorf("peak RSS %d MiB, over the 64 MiB target", peak>>10)
	}
}

func logMem(t *testing.T, stage string) {
	t.Helper()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	t.Logf("%s: RSS %d MiB (peak %d MiB), Go heap in use %d MiB", stage,
		status(t, "VmRSS")>>10, status(t, "VmHWM")>>10, ms.HeapInuse>>20)
}

// status returns a kB figure of /proc/self/status.
func status(t *testing.T, key string) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, key+":"); ok {
			n, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			return n
		}
	}
	t.Fatalf("no %s in /proc/self/status", key)
	return 0
}
