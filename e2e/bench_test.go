package e2e

// Process-level benchmarks behind BENCHMARKS.md (issues 16 and 21). They are
// tests that run only with GOBRIDGE_BENCH=1 (they take minutes and print
// figures, as "BENCH ..." lines with -v); what they assert is correctness
// (every message arrives, per-key order, dead letters), never speed.
// GOBRIDGE_E2E_BINARY runs them against another gobridge build (see
// TestMain), so the same harness measures the engine before and after a
// change.

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/gobridge/gobridge/internal/testservices"
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

// benchPayload is a 200-byte message: "<publish time, UnixNano> <id> " and
// padding. The sink reads both back.
func benchPayload(id int) []byte {
	p := fmt.Appendf(make([]byte, 0, 200), "%d %010d ", time.Now().UnixNano(), id)
	return append(p, bytes.Repeat([]byte("x"), max(0, 200-len(p)))...)
}

func parsePayload(body []byte) (ts int64, id int, ok bool) {
	sp := bytes.IndexByte(body, ' ')
	if sp < 0 || len(body) < sp+11 {
		return 0, 0, false
	}
	ts, err1 := strconv.ParseInt(string(body[:sp]), 10, 64)
	n, err2 := strconv.Atoi(string(body[sp+1 : sp+11]))
	return ts, n, err1 == nil && err2 == nil
}

// benchSink is the HTTP target: it records each id's first arrival and its
// publish-to-arrival latency, counts duplicates and per-key order
// violations (a first arrival of an id below one already delivered for its
// key, key = id % keys), answers 502 while down and 500 for the poison id
// always. Requests with an X-Load header come from loadGen and are only
// counted.
type benchSink struct {
	srv    *httptest.Server
	keys   int
	poison int // -1: none
	down   atomic.Bool

	refused  atomic.Int64 // 502s and 500s answered
	loadReqs atomic.Int64

	mu       sync.Mutex
	arrived  []int64 // per id: first arrival, UnixNano; 0: not yet
	lat      []int64 // per id: publish to first arrival, ns
	lastID   []int   // per key: the highest id delivered
	count    int     // distinct ids delivered
	dups     int
	disorder int
	examples []string    // the first order violations, described
	tried    map[int]int // ids answered 502 or 500, and how often
}

func newBenchSink(t *testing.T, total, keys, poison int) *benchSink {
	s := &benchSink{keys: max(keys, 1), poison: poison,
		arrived: make([]int64, total), lat: make([]int64, total), lastID: make([]int, max(keys, 1)),
		tried: map[int]int{}}
	for i := range s.lastID {
		s.lastID[i] = -1
	}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *benchSink) serve(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	if r.Header.Get("X-Load") != "" {
		if _, _, ok := parsePayload(body); ok {
			s.mu.Lock() // the same bookkeeping cost as a delivery
			s.loadReqs.Add(1)
			s.mu.Unlock()
		}
		w.WriteHeader(http.StatusNoContent)
		return
	}
	w.WriteHeader(s.record(body))
}

// record takes one delivery and returns the HTTP status to answer.
func (s *benchSink) record(body []byte) int {
	ts, id, ok := parsePayload(body)
	switch {
	case !ok || id < 0 || id >= len(s.arrived):
		return http.StatusBadRequest
	case s.down.Load() || id == s.poison:
		s.refused.Add(1)
		s.mu.Lock()
		s.tried[id]++
		s.mu.Unlock()
		if id == s.poison {
			return http.StatusInternalServerError
		}
		return http.StatusBadGateway
	}
	now := time.Now().UnixNano()
	s.mu.Lock()
	if s.arrived[id] != 0 {
		s.dups++
	} else {
		s.arrived[id], s.lat[id] = now, now-ts
		s.count++
		k := id % s.keys
		if id < s.lastID[k] {
			s.disorder++
			if len(s.examples) < 20 {
				s.examples = append(s.examples, fmt.Sprintf("id %d (key %d, refused %d times before) after id %d",
					id, k, s.tried[id], s.lastID[k]))
			}
		}
		s.lastID[k] = max(s.lastID[k], id)
	}
	s.mu.Unlock()
	return http.StatusNoContent
}

func (s *benchSink) delivered() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.count
}

// span returns the first and last first-arrival of ids [from, to) and how
// many of them arrived.
func (s *benchSink) span(from, to int) (first, last time.Time, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var lo, hi int64
	for _, at := range s.arrived[from:to] {
		if at == 0 {
			continue
		}
		n++
		if lo == 0 || at < lo {
			lo = at
		}
		hi = max(hi, at)
	}
	return time.Unix(0, lo), time.Unix(0, hi), n
}

// latency returns the p50 and p99 publish-to-arrival latency of ids
// [from, to), in ms.
func (s *benchSink) latency(from, to int) (p50, p99 float64) {
	s.mu.Lock()
	lat := make([]int64, 0, to-from)
	for i := from; i < to; i++ {
		if s.arrived[i] != 0 {
			lat = append(lat, s.lat[i])
		}
	}
	s.mu.Unlock()
	return percentiles(lat)
}

func percentiles(ns []int64) (p50, p99 float64) {
	if len(ns) == 0 {
		return 0, 0
	}
	slices.Sort(ns)
	pct := func(p float64) float64 { return float64(ns[int(p*float64(len(ns)-1))]) / 1e6 }
	return pct(0.50), pct(0.99)
}

// loadGen posts 200-byte bodies to the sink from conc keep-alive
// connections for d and returns the requests/s it got: the sink's own rate.
func loadGen(t *testing.T, s *benchSink, conc int, d time.Duration) float64 {
	t.Helper()
	tr := &http.Transport{MaxIdleConnsPerHost: conc, MaxConnsPerHost: conc}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	body := benchPayload(0)
	before := s.loadReqs.Load()
	stop := time.Now().Add(d)
	var wg sync.WaitGroup
	var failed atomic.Int64
	start := time.Now()
	for range conc {
		wg.Go(func() {
			for time.Now().Before(stop) {
				req, _ := http.NewRequest(http.MethodPost, s.srv.URL, bytes.NewReader(body))
				req.Header.Set("X-Load", "1")
				resp, err := client.Do(req)
				if err != nil {
					failed.Add(1)
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
	}
	wg.Wait()
	if f := failed.Load(); f > 0 {
		t.Fatalf("load generator: %d requests failed", f)
	}
	return float64(s.loadReqs.Load()-before) / time.Since(start).Seconds()
}

// publishRange publishes ids [from, to) at QoS 1 on "<run>/x" (or
// "<run>/k<id%keys>/x" with keys > 0): at rate msg/s, or as fast as paho
// can with rate 0. At most 1,000 publishes wait for the broker's PUBACK
// (paho has 65,535 packet ids), and when gate is set it is asked before
// each publish and publishing waits while it says no (flow control: the
// broker's queue stays small). It returns when publishing started and
// fails the test on a refused publish.
func publishRange(t *testing.T, pub paho.Client, run string, from, to, keys, rate int, gate func(next int) bool) time.Time {
	t.Helper()
	const window = 1000
	toks := make([]paho.Token, window)
	wait := func(tok paho.Token) {
		if tok == nil {
			return
		}
		if !tok.WaitTimeout(time.Minute) || tok.Error() != nil {
			t.Fatalf("publish not acknowledged by the broker: %v", tok.Error())
		}
	}
	start := time.Now()
	for i := from; i < to; i++ {
		for gate != nil && !gate(i) {
			time.Sleep(2 * time.Millisecond) // flow control, not synchronisation
		}
		wait(toks[i%window])
		topic := run + "/x"
		if keys > 0 {
			topic = fmt.Sprintf("%s/k%02d/x", run, i%keys)
		}
		toks[i%window] = pub.Publish(topic, 1, false, benchPayload(i))
		if rate > 0 && (i-from)%20 == 19 {
			// Pacing the load: sleep until this message's slot.
			time.Sleep(time.Until(start.Add(time.Duration(i-from+1) * time.Second / time.Duration(rate))))
		}
	}
	for _, tok := range toks {
		wait(tok)
	}
	return start
}

// benchConfig is a gobridge config: an mqtt receiver on run/#, an HTTP
// sender to url and one route with the given delivery lines, and an outbox
// (a SQLite file in dir, or the given stores block).
func benchConfig(run, admin, mqttURL, url, outbox, route string) string {
	return fmt.Sprintf(`version: 1
bridge: {id: %[1]s, admin: {listen: %[2]q}}
stores:
%[5]s
receivers:
  - id: plant
    type: mqtt
    options: {broker_urls: [%[3]q], client_id: %[1]s, clean_session: true}
    topics: [{topic: "%[1]s/#", qos: 1}]
senders:
  - {id: sink, type: http, options: {url: %[4]q}}
routes:
  - id: bench
    receiver: plant
    topic: "%[1]s/#"
    sender: sink
%[6]s
`, run, admin, mqttURL, url, outbox, route)
}

func sqliteOutbox(dir string) string {
	return fmt.Sprintf("  outbox: {type: sqlite, options: {path: %q}}", filepath.Join(dir, "outbox.db"))
}

// TestBench_EndToEnd is the issue 16 harness: GOBRIDGE_BENCH_N (50,000) QoS
// 1 messages of 200 bytes through Mosquitto to an HTTP sink, as fast as paho
// publishes and paced at 2,000 msg/s, for a bare paho subscriber (the
// reference) and a gobridge process in shared_outbox (SQLite, sync full) and
// direct_hold. Per variant it reports msg/s (first publish to last arrival),
// p50/p99 publish-to-arrival latency, and the bridge process's user+system
// CPU per message. GOBRIDGE_BENCH_VARIANTS picks variants (comma-separated).
//
//	GOBRIDGE_BENCH=1 go test -run TestBench_EndToEnd -v -timeout 30m ./e2e/
func TestBench_EndToEnd(t *testing.T) {
	needBench(t)
	n := envInt(t, "GOBRIDGE_BENCH_N", 50000)
	variants := envStr("GOBRIDGE_BENCH_VARIANTS", "bare,shared_outbox,direct_hold,bare/paced_2k,shared_outbox/paced_2k,direct_hold/paced_2k")
	for _, v := range strings.Split(variants, ",") {
		mode, paced, _ := strings.Cut(v, "/")
		rate := 0
		if paced != "" {
			rate = 2000
		}
		t.Run(v, func(t *testing.T) {
			if mode == "bare" {
				benchBare(t, n, rate)
			} else {
				benchBridge(t, mode, n, rate)
			}
		})
	}
}

func benchBare(t *testing.T, n, rate int) {
	mqttURL := testservices.MQTTURL(t)
	run := runID("bench-bare")
	s := newBenchSink(t, n, 0, -1)
	load := loadAvg()
	o := paho.NewClientOptions().AddBroker(mqttURL).SetClientID(run + "-sub").SetOrderMatters(true)
	sub := paho.NewClient(o)
	if tok := sub.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("connect: %v", tok.Error())
	}
	defer sub.Disconnect(100)
	tok := sub.Subscribe(run+"/#", 1, func(_ paho.Client, m paho.Message) {
		s.record(m.Payload()) // the sink's bookkeeping, without HTTP
	})
	if !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("subscribe: %v", tok.Error())
	}
	pub := publisher(t, mqttURL, run+"-pub")
	start := publishRange(t, pub, run, 0, n, 0, rate, nil)
	waitFor(t, 5*time.Minute, "every message at the subscriber", func() bool { return s.delivered() == n })
	_, last, _ := s.span(0, n)
	p50, p99 := s.latency(0, n)
	report(t, "e2e", "variant", variantName("bare", rate), "n", n, "msg_s", float64(n)/last.Sub(start).Seconds(),
		"p50_ms", p50, "p99_ms", p99, "load", load)
}

func variantName(mode string, rate int) string {
	if rate > 0 {
		return fmt.Sprintf("%s/paced_%d", mode, rate)
	}
	return mode
}

func benchBridge(t *testing.T, mode string, n, rate int) {
	mqttURL := testservices.MQTTURL(t)
	run := runID("bench-" + mode)
	s := newBenchSink(t, n, 0, -1)
	dir := t.TempDir()
	admin := freeAddr(t)
	route := "    policy: {max_in_flight: 100}"
	if mode == "shared_outbox" {
		route = `    delivery_mode: shared_outbox
    session: {id: bench, batch_size: 200}
    policy: {max_in_flight: 100, max_outbox_depth: 1000000}`
	}
	// GOBRIDGE_BENCH_BRIDGE_ENV: space-separated KEY=VALUE for the bridge
	// process only (e.g. GOMAXPROCS=1 GOGC=200).
	env := strings.Fields(os.Getenv("GOBRIDGE_BENCH_BRIDGE_ENV"))
	b := startBridge(t, dir, "gobridge", admin, benchConfig(run, admin, mqttURL, s.srv.URL, sqliteOutbox(dir), route), env...)
	b.waitReady(t, 30*time.Second)
	pid := b.cmd.Process.Pid
	pub := publisher(t, mqttURL, run+"-pub")
	load := loadAvg()
	stopPerf := perfRecord(t, pid, variantName(mode, rate))
	defer stopPerf()
	cpu0 := procCPU(t, pid)
	start := publishRange(t, pub, run, 0, n, 0, rate, nil)
	persisted := 0.0
	if mode == "shared_outbox" && rate == 0 {
		// Polled every 100 ms: each scrape of /metrics costs the bridge CPU.
		for b.metric("gobridge_route_persisted_total") < float64(n) {
			if time.Since(start) > 5*time.Minute {
				t.Fatal("not every message persisted after 5m")
			}
			time.Sleep(100 * time.Millisecond) // polling interval
		}
		persisted = float64(n) / time.Since(start).Seconds()
	}
	waitFor(t, 5*time.Minute, "every message at the sink", func() bool { return s.delivered() == n })
	cpu := procCPU(t, pid) - cpu0
	stopPerf()
	_, last, _ := s.span(0, n)
	p50, p99 := s.latency(0, n)
	rss, hwm := procMem(pid)
	report(t, "e2e", "variant", variantName(mode, rate), "bin", binaryName(), "env", strings.Join(env, ","), "n", n,
		"msg_s", float64(n)/last.Sub(start).Seconds(), "persisted_msg_s", persisted,
		"p50_ms", p50, "p99_ms", p99, "cpu_us_msg", float64(cpu.Microseconds())/float64(n),
		"rss_mib", float64(rss)/mib, "hwm_mib", float64(hwm)/mib, "load", load)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dups > 0 {
		t.Logf("%d duplicate deliveries", s.dups)
	}
}
