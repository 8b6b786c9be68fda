package sqlite

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gobridge/gobridge/message"
	"github.com/gobridge/gobridge/stores"
)

const (
	crashEnvPath  = "GOBRIDGE_CRASH_CHILD_DB"
	crashEnvSync  = "GOBRIDGE_CRASH_CHILD_SYNC"
	crashEnvRound = "GOBRIDGE_CRASH_CHILD_ROUND"
	crashBatch    = 50
)

func crashID(round, batch, i int) string { return fmt.Sprintf("r%d-b%d-%d", round, batch, i) }

// TestCrashChild is the child side of TestStore_CrashSafety: it appends
// batches forever and prints "ok N" after each Append of batch N returned.
// It does nothing unless started by the parent.
func TestCrashChild(t *testing.T) {
	path := os.Getenv(crashEnvPath)
	if path == "" {
		t.Skip("child process of TestStore_CrashSafety")
	}
	round, _ := strconv.Atoi(os.Getenv(crashEnvRound))
	s, err := Open(path, Options{Sync: os.Getenv(crashEnvSync)})
	if err != nil {
		fmt.Println("open:", err)
		os.Exit(2)
	}
	payload := []byte(strings.Repeat("x", 100))
	t0 := time.Unix(1_700_000_000, 0)
	fmt.Println("ready")
	for b := 0; ; b++ {
		recs := make([]stores.Record, crashBatch)
		for i := range recs {
			recs[i] = stores.Record{Session: "s", Route: "r", Envelope: message.Envelope{
				ID: crashID(round, b, i), Topic: "t", Payload: payload, ReceivedAt: t0,
			}, CreatedAt: t0, NextAttemptAt: t0}
		}
		if err := s.Append(t.Context(), recs...); err != nil {
			fmt.Println("append:", err)
			os.Exit(2)
		}
		fmt.Println("ok", b)
	}
}

// TestStore_CrashSafety SIGKILLs a child that appends batches, at random
// moments, many times over one file: after each reopen every batch whose
// Append returned is fully present, none is partly present, and the depth
// counter matches the rows.
func TestStore_CrashSafety(t *testing.T) {
	if testing.Short() {
		t.Skip("re-executes the test binary 40 times")
	}
	for _, sync := range []string{"full", "normal"} {
		t.Run("sync="+sync, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "outbox.db")
			acked := map[int]int{} // round -> batches acknowledged
			for round := range 20 {
				acked[round] = crashRound(t, path, sync, round)
				checkAfterCrash(t, path, acked)
			}
		})
	}
}

// crashRound runs one child and kills it after a random number of
// acknowledged batches plus a random fraction of a batch; it returns how
// many batches the child acknowledged.
func crashRound(t *testing.T, path, sync string, round int) int {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), crashEnvPath+"="+path, crashEnvSync+"="+sync, crashEnvRound+"="+strconv.Itoa(round))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	killAfter := rand.IntN(15)
	kill := func() { _ = cmd.Process.Signal(syscall.SIGKILL) }
	sc := bufio.NewScanner(out)
	last := -1
	killed := false
	for sc.Scan() {
		line := sc.Text()
		var n int
		switch {
		case line == "ready":
			if killAfter == 0 {
				time.AfterFunc(time.Duration(rand.IntN(3000))*time.Microsecond, kill)
				killed = true
			}
			continue
		case strings.HasPrefix(line, "ok "):
			n, _ = strconv.Atoi(strings.TrimPrefix(line, "ok "))
		default:
			t.Fatalf("child: %s", line)
		}
		last = n
		if !killed && n+1 >= killAfter {
			// Land the kill anywhere within the next batch or two.
			time.AfterFunc(time.Duration(rand.IntN(3000))*time.Microsecond, kill)
			killed = true
		}
	}
	err = cmd.Wait()
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("child did not die by SIGKILL: %v", err)
	}
	return last + 1
}

func checkAfterCrash(t *testing.T, path string, acked map[int]int) {
	t.Helper()
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatalf("reopen after crash: %v", err)
	}
	defer s.Close()
	rows, err := s.r.Query(`SELECT id FROM outbox`)
	if err != nil {
		t.Fatal(err)
	}
	present := map[[2]int]int{} // (round, batch) -> records
	total := 0
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		var r, b, i int
		if _, err := fmt.Sscanf(id, "r%d-b%d-%d", &r, &b, &i); err != nil {
			t.Fatalf("unexpected ID %q", id)
		}
		present[[2]int{r, b}]++
		total++
	}
	rows.Close()
	for rb, n := range present {
		if n != crashBatch {
			t.Errorf("round %d batch %d: %d of %d records present (a partial batch)", rb[0], rb[1], n, crashBatch)
		}
	}
	for round, n := range acked {
		for b := range n {
			if present[[2]int{round, b}] != crashBatch {
				t.Errorf("round %d batch %d: acknowledged but %d of %d records present", round, b, present[[2]int{round, b}], crashBatch)
			}
		}
	}
	if testing.Verbose() {
		last := len(acked) - 1
		n := 0
		for rb := range present {
			if rb[0] == last {
				n++
			}
		}
		t.Logf("round %d: %d batches acknowledged, %d present", last, acked[last], n)
	}
	st, err := s.Stats(t.Context(), "s")
	if err != nil {
		t.Fatal(err)
	}
	if st.Pending != total {
		t.Errorf("Stats.Pending = %d, want %d rows", st.Pending, total)
	}
}
