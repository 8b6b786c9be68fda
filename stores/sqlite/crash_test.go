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

// TestCrashChild is the child side of TestStore_CrashSafety: it writes
// batches forever, the engine's way (records appended claimed under the
// partition's lease, plus Done of the first half of the previous batch), and
// prints "ok N" after the Write of batch N returned. It does nothing unless
// started by the parent.
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
	le, err := s.Acquire(t.Context(), stores.PartitionLease("s", 0), "child", time.Hour, time.Now())
	if err != nil {
		fmt.Println("acquire:", err)
		os.Exit(2)
	}
	payload := []byte(strings.Repeat("x", 100))
	t0 := time.Unix(1_700_000_000, 0)
	fmt.Println("ready")
	var prev []stores.Record
	for b := 0; ; b++ {
		w := stores.Batch{Append: make([]stores.Record, crashBatch)}
		for i := range w.Append {
			w.Append[i] = stores.Record{Session: "s", Route: "r", Token: le.Token, Envelope: message.Envelope{
				ID: crashID(round, b, i), Topic: "t", Payload: payload, ReceivedAt: t0,
			}, CreatedAt: t0}
		}
		for _, r := range prev[:len(prev)/2] {
			w.Settle = append(w.Settle, stores.Settlement{Key: r.Key(), Token: le.Token, Outcome: stores.Done})
		}
		if err := s.Write(t.Context(), &w); err != nil {
			fmt.Println("write:", err)
			os.Exit(2)
		}
		prev = w.Append
		fmt.Println("ok", b)
	}
}

// TestStore_CrashSafety SIGKILLs a child that writes batches, at random
// moments, many times over one file: after each kill the lock is free at
// once, and after each reopen every batch whose Write returned is there
// whole (its records, and the Done of half the batch before it), no batch is
// there in part, and Stats counts what the file holds.
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
	rows, err := s.conn.QueryContext(t.Context(), `SELECT id, state FROM outbox`)
	if err != nil {
		t.Fatal(err)
	}
	type rb struct{ round, batch int }
	present, done := map[rb]int{}, map[rb]int{} // records, and tombstones among them
	live := 0
	for rows.Next() {
		var (
			id      string
			state   int
			r, b, i int
		)
		if err := rows.Scan(&id, &state); err != nil {
			t.Fatal(err)
		}
		if _, err := fmt.Sscanf(id, "r%d-b%d-%d", &r, &b, &i); err != nil {
			t.Fatalf("unexpected ID %q", id)
		}
		present[rb{r, b}]++
		switch {
		case state == 2 && i < crashBatch/2:
			done[rb{r, b}]++
		case state == 0:
			live++
		default:
			t.Errorf("record %s in state %d", id, state)
		}
	}
	rows.Close()
	for k, n := range present {
		if n != crashBatch {
			t.Errorf("round %d batch %d: %d of %d records present (a partial batch)", k.round, k.batch, n, crashBatch)
		}
		// The Write of batch b+1 settled the first half of batch b.
		want := 0
		if present[rb{k.round, k.batch + 1}] > 0 {
			want = crashBatch / 2
		}
		if done[k] != want {
			t.Errorf("round %d batch %d: %d records done, want %d", k.round, k.batch, done[k], want)
		}
	}
	for round, n := range acked {
		for b := range n {
			if present[rb{round, b}] != crashBatch {
				t.Errorf("round %d batch %d: acknowledged but %d of %d records present", round, b, present[rb{round, b}], crashBatch)
			}
		}
	}
	if testing.Verbose() {
		last := len(acked) - 1
		t.Logf("round %d: %d batches acknowledged", last, acked[last])
	}
	all, err := s.Stats(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	got := 0
	for _, st := range all {
		got += st.Live
	}
	if got != live {
		t.Errorf("Stats live = %d, want %d live rows", got, live)
	}
}
