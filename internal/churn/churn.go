// Package churn measures what a process keeps after repeated events
// (connections, reloads, requests): goroutines, live heap, open file
// descriptors and any counts a test adds. Tests run rounds of an event at
// two totals and compare: what grows with the number of rounds is a leak.
// It is test support, not product code.
package churn

import (
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Sample is one measurement.
type Sample struct {
	Goroutines int
	HeapBytes  int64 // live heap after two GCs
	FDs        int   // open file descriptors (-1 where /proc is absent)
	RSSBytes   int64 // resident set (logged only: the allocator keeps freed pages, so it is noisy)
	Extra      map[string]int
}

func (s Sample) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "goroutines=%d heap=%dKiB fds=%d rss=%dKiB", s.Goroutines, s.HeapBytes>>10, s.FDs, s.RSSBytes>>10)
	for _, k := range slices.Sorted(mapKeys(s.Extra)) {
		fmt.Fprintf(&b, " %s=%d", k, s.Extra[k])
	}
	return b.String()
}

func mapKeys(m map[string]int) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// Measure takes a sample; extra, when set, adds the test's own counts (map
// sizes, series).
func Measure(extra func() map[string]int) Sample {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	s := Sample{Goroutines: runtime.NumGoroutine(), HeapBytes: int64(ms.HeapAlloc), FDs: -1}
	if fds, err := os.ReadDir("/proc/self/fd"); err == nil {
		s.FDs = len(fds)
	}
	if status, err := os.ReadFile("/proc/self/status"); err == nil {
		for line := range strings.Lines(string(status)) {
			if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
				kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
				s.RSSBytes = kb << 10
			}
		}
	}
	if extra != nil {
		s.Extra = extra()
	}
	return s
}

// Tolerance is how much a count may differ between the two totals.
type Tolerance struct {
	Goroutines, FDs int
	HeapBytes       int64
	Extra           int // for every extra count
}

// Check runs round(i) for i in [0, n1) and then up to n2 (after warm-up
// rounds), measuring after each total once the process has settled, and
// fails t when a count grew by more than tol between n1 and n2 rounds:
// what every round leaves behind. It logs both samples and the residue per
// round. Settling polls (up to 10 s) for goroutines and extra counts to
// come back down, since closed connections end their goroutines
// asynchronously.
func Check(t *testing.T, n1, n2 int, tol Tolerance, extra func() map[string]int, round func(i int)) (a, b Sample) {
	t.Helper()
	warm := max(n1/10, 10)
	for i := range warm {
		round(-1 - i)
	}
	settle := func(ref *Sample) Sample {
		deadline := time.Now().Add(10 * time.Second)
		for {
			s := Measure(extra)
			if ref == nil || !grew(*ref, s, tol) || time.Now().After(deadline) {
				if ref == nil {
					// No reference yet: wait until goroutines stop falling.
					for time.Now().Before(deadline) {
						time.Sleep(50 * time.Millisecond) // polling until settled, not synchronisation
						next := Measure(extra)
						if next.Goroutines >= s.Goroutines && !extraFell(s, next) {
							return next
						}
						s = next
					}
				}
				return s
			}
			time.Sleep(50 * time.Millisecond) // polling with a deadline
		}
	}
	for i := range n1 {
		round(i)
	}
	a = settle(nil)
	for i := n1; i < n2; i++ {
		round(i)
	}
	b = settle(&a)
	per := func(x, y int64) float64 { return float64(y-x) / float64(n2-n1) }
	t.Logf("after %d rounds: %v", n1, a)
	t.Logf("after %d rounds: %v", n2, b)
	t.Logf("per round: goroutines %+.3f heap %+.1f B fds %+.3f", per(int64(a.Goroutines), int64(b.Goroutines)),
		per(a.HeapBytes, b.HeapBytes), per(int64(a.FDs), int64(b.FDs)))
	if grew(a, b, tol) {
		t.Errorf("grew with churn between %d and %d rounds (tolerance %+v):\n  %v\n  %v", n1, n2, tol, a, b)
	}
	return a, b
}

func extraFell(a, b Sample) bool {
	for k, v := range a.Extra {
		if b.Extra[k] < v {
			return true
		}
	}
	return false
}

func grew(a, b Sample, tol Tolerance) bool {
	if b.Goroutines-a.Goroutines > tol.Goroutines || b.FDs-a.FDs > tol.FDs || b.HeapBytes-a.HeapBytes > tol.HeapBytes {
		return true
	}
	for k, v := range b.Extra {
		if v-a.Extra[k] > tol.Extra {
			return true
		}
	}
	return false
}
