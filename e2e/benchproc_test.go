package e2e

// What the process-level benchmarks measure besides the messages: whether
// they run at all (GOBRIDGE_BENCH), their knobs from the environment, the
// "BENCH ..." result lines, the machine's load, and the bridge process's
// CPU time, memory and (optionally) CPU profile, read from /proc and perf.

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

func needBench(t *testing.T) {
	t.Helper()
	needBinary(t)
	if os.Getenv("GOBRIDGE_BENCH") == "" {
		t.Skip("benchmark: set GOBRIDGE_BENCH=1 (and run with -v to see the figures)")
	}
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("benchmark: reads the bridge's CPU and memory from /proc")
	}
}

func envInt(t *testing.T, name string, def int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		t.Fatalf("%s=%q: %v", name, v, err)
	}
	return n
}

func envStr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// report prints one result line: "BENCH <name> key=value ...".
func report(t *testing.T, name string, kv ...any) {
	t.Helper()
	var sb strings.Builder
	fmt.Fprintf(&sb, "BENCH %s", name)
	for i := 0; i+1 < len(kv); i += 2 {
		switch v := kv[i+1].(type) {
		case float64:
			fmt.Fprintf(&sb, " %s=%.4g", kv[i], v)
		default:
			fmt.Fprintf(&sb, " %s=%v", kv[i], v)
		}
	}
	t.Log(sb.String())
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	return strings.Join(f[:3], "/")
}

// binaryName says which build ran: the directory of GOBRIDGE_E2E_BINARY, or
// "this-tree".
func binaryName() string {
	if os.Getenv("GOBRIDGE_E2E_BINARY") == "" {
		return "this-tree"
	}
	return filepath.Base(filepath.Dir(binary))
}

// procCPU returns the user+system CPU time of a process, all threads
// (/proc/PID/stat, in clock ticks of 10 ms).
func procCPU(t *testing.T, pid int) time.Duration {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatalf("read CPU of %d: %v", pid, err)
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+2:]))
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(utime+stime) * 10 * time.Millisecond // USER_HZ is 100 on Linux
}

// procSwitches returns the context switches (voluntary and not) of a
// process's threads so far (/proc/PID/task/*/status; a thread that exited
// no longer counts, and Go's rarely exit).
func procSwitches(pid int) int64 {
	paths, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/status", pid))
	var n int64
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.HasSuffix(k, "ctxt_switches") {
				c, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
				n += c
			}
		}
	}
	return n
}

// procMem returns a process's resident set and its peak (VmRSS, VmHWM), in
// bytes; zeros when the process is gone.
func procMem(pid int) (rss, hwm int64) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), ":")
		kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		switch k {
		case "VmRSS":
			rss = kb << 10
		case "VmHWM":
			hwm = kb << 10
		}
	}
	return rss, hwm
}

const mib = 1 << 20

// perfRecord samples the CPU stacks of a process with Linux perf into
// $GOBRIDGE_BENCH_PERF/<name>.perf.data until the returned stop is called
// (a no-op when GOBRIDGE_BENCH_PERF is unset). Read it with
// `perf report -i FILE --no-children` (Go keeps frame pointers, so -g
// stacks are whole).
func perfRecord(t *testing.T, pid int, name string) (stop func()) {
	t.Helper()
	dir := os.Getenv("GOBRIDGE_BENCH_PERF")
	if dir == "" {
		return func() {}
	}
	out := filepath.Join(dir, strings.ReplaceAll(name, "/", "_")+".perf.data")
	cmd := exec.Command("perf", "record", "-F", "997", "-g", "-o", out, "-p", strconv.Itoa(pid))
	if err := cmd.Start(); err != nil {
		t.Fatalf("perf record: %v", err)
	}
	return sync.OnceFunc(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		_ = cmd.Wait()
		t.Logf("CPU profile: %s", out)
	})
}
