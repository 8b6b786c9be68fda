package e2e

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gobridge/gobridge/internal/testservices"
)

// binary is the gobridge executable TestMain built, or GOBRIDGE_E2E_BINARY
// ("" under -short).
var binary string

func TestMain(m *testing.M) {
	flag.Parse()
	if spec := os.Getenv(relayEnv); spec != "" {
		os.Exit(runRelay(spec)) // this binary as the relay of TestBench_EndToEnd
	}
	if testing.Short() {
		os.Exit(m.Run())
	}
	// GOBRIDGE_E2E_BINARY: run the tests against a gobridge built elsewhere
	// (the benchmarks compare builds this way).
	if binary = os.Getenv("GOBRIDGE_E2E_BINARY"); binary != "" {
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "gobridge-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "gobridge")
	out, err := exec.Command("go", "build", "-o", binary, "github.com/gobridge/gobridge/cmd/gobridge").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2e: build gobridge: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// needBinary skips the test under -short (TestMain did not build gobridge).
func needBinary(t *testing.T) {
	t.Helper()
	if testing.Short() || binary == "" {
		t.Skip("process-level test: runs gobridge binaries (skipped with -short)")
	}
}

// runID returns a name unique to this test run, usable in topics, client
// ids, queue and table names.
func runID(prefix string) string {
	return fmt.Sprintf("%s-%d-%d", prefix, os.Getpid(), time.Now().UnixNano()%1e9)
}

// freeAddr returns a loopback address that was free a moment ago (see
// testservices.FreeAddr).
func freeAddr(t testing.TB) string {
	t.Helper()
	return testservices.FreeAddr(t)
}

// waitFor polls cond until it holds, failing the test after timeout.
func waitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond) // polling interval, not synchronisation
	}
}

// bridge is one running `gobridge run` process.
type bridge struct {
	name    string
	admin   string // host:port of its admin server
	cfgPath string
	logPath string // stderr: the logs
	outPath string // stdout: what stdout senders write
	cmd     *exec.Cmd
	cancel  context.CancelFunc
	done    chan struct{}
	err     error // cmd.Wait's result, set before done closes
	env     []string
	killed  map[*exec.Cmd]bool // runs ended by kill, not SIGTERM
}

// startBridge writes cfg to a file in dir and starts `gobridge run -c` on
// it, with env (KEY=VALUE) added to the test's environment. cfg must use
// admin as its bridge.admin.listen. The cleanup stops the
// process with SIGTERM (SIGKILL after 20s), fails the test on a non-zero
// exit of a process that was not killed, and logs the tail of its log when
// the test failed.
func startBridge(t testing.TB, dir, name, admin, cfg string, env ...string) *bridge {
	t.Helper()
	b := &bridge{name: name, admin: admin, env: env, killed: map[*exec.Cmd]bool{},
		cfgPath: filepath.Join(dir, name+".yaml"), logPath: filepath.Join(dir, name+".log"),
		outPath: filepath.Join(dir, name+".stdout")}
	if err := os.WriteFile(b.cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	b.start(t)
	return b
}

// start (re)starts the process on its config, appending to its log.
func (b *bridge) start(t testing.TB) {
	t.Helper()
	logf, err := os.OpenFile(b.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	outf, err := os.OpenFile(b.outPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		logf.Close()
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, binary, "run", "-c", b.cfgPath)
	cmd.Stdout, cmd.Stderr = outf, logf
	cmd.Env = append(os.Environ(), b.env...)
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 20 * time.Second
	if err := cmd.Start(); err != nil {
		cancel()
		logf.Close()
		outf.Close()
		t.Fatalf("start %s: %v", b.name, err)
	}
	b.cmd, b.cancel, b.done, b.err = cmd, cancel, make(chan struct{}), nil
	done := b.done
	var runErr error
	go func() {
		runErr = cmd.Wait()
		logf.Close()
		outf.Close()
		b.err = runErr
		close(done)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		if t.Failed() {
			t.Logf("%s log (tail):\n%s", b.name, tail(b.logPath, 60))
		}
		// After Cancel (SIGTERM), Wait reports the context's error even for
		// a clean exit: the exit status is what counts.
		if st := cmd.ProcessState; !b.killed[cmd] && (st == nil || !st.Success()) {
			t.Errorf("%s exited with %v (%v) after SIGTERM, want status 0", b.name, st, runErr)
		}
	})
}

// kill SIGKILLs the process and waits for it to be gone.
func (b *bridge) kill(t *testing.T) {
	t.Helper()
	b.killed[b.cmd] = true
	if err := b.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatalf("kill %s: %v", b.name, err)
	}
	<-b.done
}

// waitReady polls /readyz until it answers 200, failing the test when the
// process exits first or after timeout.
func (b *bridge) waitReady(t testing.TB, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		code, body, err := httpGet("http://" + b.admin + "/readyz")
		if err == nil && code == http.StatusOK {
			return
		}
		select {
		case <-b.done:
			t.Fatalf("%s exited (%v) before it was ready; log:\n%s", b.name, b.err, tail(b.logPath, 40))
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not ready after %s: %d %s %v", b.name, timeout, code, body, err)
		}
		time.Sleep(20 * time.Millisecond) // polling interval
	}
}

// metric sums the samples of one metric whose labels contain every
// name="value" pair in labels (e.g. `route="x"`), from /metrics. It returns
// -1 when the endpoint cannot be read.
func (b *bridge) metric(name string, labels ...string) float64 {
	code, body, err := httpGet("http://" + b.admin + "/metrics")
	if err != nil || code != http.StatusOK {
		return -1
	}
	var sum float64
	sc := bufio.NewScanner(strings.NewReader(body))
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name) {
			continue
		}
		rest := line[len(name):]
		var lbls string
		if strings.HasPrefix(rest, "{") {
			end := strings.Index(rest, "}")
			if end < 0 {
				continue
			}
			lbls, rest = rest[1:end], rest[end+1:]
		}
		if !strings.HasPrefix(rest, " ") {
			continue // a longer metric name
		}
		ok := true
		for _, l := range labels {
			if !strings.Contains(","+lbls+",", ","+l+",") {
				ok = false
			}
		}
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(strings.Fields(rest)[0], 64)
		if err == nil {
			sum += v
		}
	}
	return sum
}

var httpClient = &http.Client{Timeout: 2 * time.Second}

func httpGet(url string) (int, string, error) {
	resp, err := httpClient.Get(url)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}

// tail returns the last n lines of a file.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
