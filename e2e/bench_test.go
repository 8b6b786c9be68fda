package e2e

// Process-level benchmarks behind BENCHMARKS.md (issues 16, 17 and 21). They are
// tests that run only with GOBRIDGE_BENCH=1 (they take minutes and print
// figures, as "BENCH ..." lines with -v); what they assert is correctness
// (every message arrives, per-key order, dead letters), never speed.
// GOBRIDGE_E2E_BINARY runs them against another gobridge build (see
// TestMain), so the same harness measures the engine before and after a
// change.

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/gobridge/gobridge/internal/testservices"
)

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
// reference), a minimal paho → net/http relay process (the floor of any
// bridge built on those two libraries: benchrelay_test.go) and a gobridge process in shared_outbox (SQLite, sync full),
// direct_hold and direct_or_outbox (a session on the same SQLite outbox,
// written only when a direct send fails). Per variant it reports msg/s
// (first publish to last arrival), p50/p99 publish-to-arrival latency, and
// the bridge process's user+system CPU per message; direct_or_outbox also
// how many messages went to the outbox. GOBRIDGE_BENCH_VARIANTS picks
// variants (comma-separated); a build without direct_or_outbox (before
// issue 17) needs a list without it.
//
//	GOBRIDGE_BENCH=1 go test -run TestBench_EndToEnd -v -timeout 30m ./e2e/
func TestBench_EndToEnd(t *testing.T) {
	needBench(t)
	n := envInt(t, "GOBRIDGE_BENCH_N", 50000)
	variants := envStr("GOBRIDGE_BENCH_VARIANTS", "bare,relay,shared_outbox,direct_hold,direct_or_outbox,"+
		"bare/paced_2k,relay/paced_2k,shared_outbox/paced_2k,direct_hold/paced_2k,direct_or_outbox/paced_2k")
	for _, v := range strings.Split(variants, ",") {
		mode, paced, _ := strings.Cut(v, "/")
		rate := 0
		if paced != "" {
			rate = 2000
		}
		t.Run(v, func(t *testing.T) {
			switch mode {
			case "bare":
				benchBare(t, n, rate)
			case "relay":
				benchRelay(t, n, rate)
			default:
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
	switch mode {
	case "shared_outbox", "direct_or_outbox":
		route = fmt.Sprintf(`    delivery_mode: %s
    session: {id: bench, batch_size: 200}
    policy: {max_in_flight: 100, max_outbox_depth: 1000000}`, mode)
	case "direct_hold": // the default mode: no session, no outbox writes
	default:
		t.Fatalf("unknown variant %q (bare, shared_outbox, direct_hold, direct_or_outbox)", mode)
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
	cpu0, sw0 := procCPU(t, pid), procSwitches(pid)
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
	cpu, sw := procCPU(t, pid)-cpu0, procSwitches(pid)-sw0
	stopPerf()
	_, last, _ := s.span(0, n)
	p50, p99 := s.latency(0, n)
	rss, hwm := procMem(pid)
	fallback := 0.0 // direct_or_outbox: messages that went to the outbox
	if mode == "direct_or_outbox" {
		fallback = b.metric("gobridge_delivery_fallback_total")
	}
	// Store writes (each one durable commit), appends and settlements alike.
	writes := b.metric("gobridge_outbox_append_seconds_count")
	report(t, "e2e", "variant", variantName(mode, rate), "bin", binaryName(), "env", strings.Join(env, ","), "n", n,
		"msg_s", float64(n)/last.Sub(start).Seconds(), "persisted_msg_s", persisted,
		"p50_ms", p50, "p99_ms", p99, "cpu_us_msg", float64(cpu.Microseconds())/float64(n),
		"ctxsw_msg", float64(sw)/float64(n),
		"fallback", fallback, "writes_per_msg", writes/float64(n), "rss_mib", float64(rss)/mib, "hwm_mib", float64(hwm)/mib, "load", load)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dups > 0 {
		t.Logf("%d duplicate deliveries", s.dups)
	}
}
