package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gobridge/gobridge/internal/testservices"
)

// TestBench_Outage is the issue 21 harness: a long outage of the target and
// its drain, through a real Mosquitto and a gobridge process.
//
//  1. The sink's own rate: a plain HTTP load generator (loadGen) for 5 s.
//  2. Outage: the sink answers 502; GOBRIDGE_OUTAGE_N (1,000,000) QoS 1
//     messages of 200 bytes are published as fast as gobridge persists them
//     (at most 50,000 ahead of its persisted count, so the broker's queue
//     stays small). Reported: the ingest rate, RSS.
//  3. Drain: the sink comes back. The drain rate over the first 30% of the
//     backlog (nothing else running) is compared with the sink's rate; then,
//     while the backlog drains, GOBRIDGE_OUTAGE_FRESH (100,000) fresh
//     messages are published as fast as they are persisted (their ingest
//     rate), then 10 s at 1,000 msg/s (the latency of their persistence,
//     from the persisted counter sampled every 50 ms, and of their
//     delivery).
//  4. Correctness: every message delivered except one poison record (id
//     777, answered 500 by the sink after the outage too), which must end as
//     the only dead letter; no per-key order violation; RSS (peak) at
//     ingest and during the drain. The load generator runs again at the end.
//
// Messages carry GOBRIDGE_OUTAGE_KEYS (64) distinct ordering keys
// ({topic.1}; 0: no ordering key), DESIGN §11.8. GOBRIDGE_OUTAGE_STORE is
// sqlite (default) or dynamodb. GOBRIDGE_OUTAGE_SINK_DELAY delays every
// answer of the sink (a target across a WAN) for the deliveries and the
// load generator alike.
//
//	GOBRIDGE_BENCH=1 go test -run TestBench_Outage -v -timeout 60m ./e2e/
func TestBench_Outage(t *testing.T) {
	needBench(t)
	n := envInt(t, "GOBRIDGE_OUTAGE_N", 1000000)
	fresh := envInt(t, "GOBRIDGE_OUTAGE_FRESH", 100000)
	keys := envInt(t, "GOBRIDGE_OUTAGE_KEYS", 64)
	store := envStr("GOBRIDGE_OUTAGE_STORE", "sqlite")
	const pacedRate, pacedFor, poison, maxInFlight = 1000, 10 * time.Second, 777, 100
	paced := pacedRate * int(pacedFor/time.Second)
	total := n + fresh + paced

	mqttURL := testservices.MQTTURL(t)
	run := runID("outage")
	s := newBenchSink(t, total, keys, poison)
	// GOBRIDGE_OUTAGE_SINK_DELAY (e.g. 20ms): the target answers after that
	// long, as across a WAN; the load generator meets the same delay.
	if d := envStr("GOBRIDGE_OUTAGE_SINK_DELAY", ""); d != "" {
		var err error
		if s.delay, err = time.ParseDuration(d); err != nil {
			t.Fatalf("GOBRIDGE_OUTAGE_SINK_DELAY: %v", err)
		}
	}
	conc := maxInFlight
	if keys > 0 {
		conc = min(keys, maxInFlight) // the most sends the drainer may have open
	}
	sinkRate := []float64{loadGen(t, s, conc, 5*time.Second)}

	dir := t.TempDir()
	outbox := sqliteOutbox(dir)
	if store == "dynamodb" {
		ddb := testservices.DynamoDBEndpoint(t)
		testservices.DropTablesAtCleanup(t, ddb, run+"-outbox")
		outbox = fmt.Sprintf("  outbox: {type: dynamodb, options: {table: %s-outbox, region: us-east-1, endpoint: %q}}", run, ddb)
	}
	route := fmt.Sprintf(`    delivery_mode: shared_outbox
    session: {id: outage}
    policy:
      max_in_flight: %d
      max_replay_attempts: 5
      replay_budget: 0s
      backoff: {initial_interval: 100ms, max_interval: 1s}`, maxInFlight)
	if keys > 0 {
		route = `    ordering_key: "{topic.1}"` + "\n" + route
	}
	admin := freeAddr(t)
	s.down.Store(true)
	env := strings.Fields(os.Getenv("GOBRIDGE_BENCH_BRIDGE_ENV")) // e.g. GOMEMLIMIT=48MiB
	b := startBridge(t, dir, "gobridge", admin, benchConfig(run, admin, mqttURL, s.srv.URL, outbox, route), env...)
	b.waitReady(t, 60*time.Second)
	pid := b.cmd.Process.Pid

	// Samplers, owned by the test: the persisted count every 50 ms, RSS
	// every 250 ms (peak per phase).
	type sample struct {
		at time.Time
		n  float64
	}
	var (
		persisted atomic.Int64
		phase     atomic.Int32 // 0 ingest, 1 idle, 2 drain
		mu        sync.Mutex
		timeline  []sample
		peak      [3]int64
		stop      = make(chan struct{})
		wg        sync.WaitGroup
	)
	wg.Go(func() {
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			if v := b.metric("gobridge_route_persisted_total"); v >= 0 {
				persisted.Store(int64(v))
				mu.Lock()
				timeline = append(timeline, sample{time.Now(), v})
				mu.Unlock()
			}
			if i%5 == 0 {
				rss, _ := procMem(pid)
				mu.Lock()
				p := &peak[phase.Load()]
				*p = max(*p, rss)
				mu.Unlock()
			}
		}
	})
	stopSamplers := sync.OnceFunc(func() { close(stop); wg.Wait() })
	defer stopSamplers()
	waitPersisted := func(want int, timeout time.Duration) time.Time {
		t.Helper()
		waitFor(t, timeout, fmt.Sprintf("%d records persisted", want), func() bool { return persisted.Load() >= int64(want) })
		return time.Now()
	}
	gate := func(next int) bool { return int64(next)-persisted.Load() < 50000 }

	// 2. Outage.
	pub := publisher(t, mqttURL, run+"-pub")
	load := loadAvg()
	cpu0 := procCPU(t, pid)
	start := publishRange(t, pub, run, 0, n, keys, 0, gate)
	ingested := waitPersisted(n, 30*time.Minute)
	ingestRate := float64(n) / ingested.Sub(start).Seconds()
	ingestCPU := procCPU(t, pid) - cpu0
	rssIngested, _ := procMem(pid)
	phase.Store(1)
	if d := b.metric("gobridge_delivery_dead_lettered_total"); d != 0 {
		t.Errorf("%v dead letters while the target was down, want 0", d)
	}
	stats := func(when string) {
		out, err := exec.Command(binary, "outbox", "stats", "-c", b.cfgPath).CombinedOutput()
		t.Logf("gobridge outbox stats (%s): %v\n%s", when, err, out)
	}
	stats("end of the outage")
	report(t, "outage-ingest", "store", store, "bin", binaryName(), "n", n, "keys", keys,
		"ingest_msg_s", ingestRate, "cpu_us_msg", float64(ingestCPU.Microseconds())/float64(n),
		"rss_mib", float64(rssIngested)/mib, "peak_rss_mib", float64(peak[0])/mib,
		"refused", s.refused.Load(), "load", load)

	// 3. Drain.
	load = loadAvg()
	phase.Store(2)
	cpu0 = procCPU(t, pid)
	up := time.Now()
	s.down.Store(false)
	stopPerf := perfRecord(t, pid, "outage-drain")
	waitFor(t, 30*time.Minute, "30% of the backlog delivered", func() bool { return s.delivered() >= n*3/10 })
	stopPerf()
	first, _, _ := s.span(0, n)
	pureEnd := time.Now()
	pureN := s.delivered()
	pureRate := float64(pureN) / pureEnd.Sub(first).Seconds()

	freshStart := publishRange(t, pub, run, n, n+fresh, keys, 0, gate)
	freshDone := waitPersisted(n+fresh, 30*time.Minute)
	freshRate := float64(fresh) / freshDone.Sub(freshStart).Seconds()
	deliveredInFresh := s.delivered() - pureN
	drainDuringFresh := float64(deliveredInFresh) / freshDone.Sub(freshStart).Seconds()

	pacedStart := publishRange(t, pub, run, n+fresh, total, keys, pacedRate, gate)
	waitPersisted(total, 5*time.Minute)
	backlogLeft := total - 1 - s.delivered()
	stats("during the drain")

	waitFor(t, 60*time.Minute, "every record delivered", func() bool { return s.delivered() == total-1 })
	drainCPU := procCPU(t, pid) - cpu0
	_, last, _ := s.span(0, total)
	waitFor(t, 60*time.Second, "the poison record dead-lettered", func() bool {
		return b.metric("gobridge_delivery_dead_lettered_total") >= 1
	})
	rssDrained, hwm := procMem(pid)
	stopSamplers()

	// The persistence latency of the paced records: from each one's publish
	// time (its slot: publishRange paces to start + i/rate) to the first
	// sample of the persisted counter that covers it.
	var persistLat []int64
	j := 0
	for i := range paced {
		slot := pacedStart.Add(time.Duration(i) * time.Second / pacedRate)
		for j < len(timeline) && timeline[j].n < float64(n+fresh+i+1) {
			j++
		}
		if j == len(timeline) {
			break
		}
		persistLat = append(persistLat, int64(max(0, timeline[j].at.Sub(slot))))
	}
	pl50, pl99 := percentiles(persistLat)
	dl50, dl99 := s.latency(n+fresh, total)
	sinkRate = append(sinkRate, loadGen(t, s, conc, 5*time.Second))
	meanSink := (sinkRate[0] + sinkRate[1]) / 2

	s.mu.Lock()
	dups, disorder := s.dups, s.disorder
	s.mu.Unlock()
	report(t, "outage-drain", "store", store, "bin", binaryName(), "n", n, "keys", keys, "sink_delay", s.delay,
		"probe_wait_s", first.Sub(up).Seconds(), "drain_msg_s", pureRate,
		"sink_req_s", fmt.Sprintf("%.0f/%.0f", sinkRate[0], sinkRate[1]), "conc", conc,
		"drain_vs_sink", pureRate/meanSink,
		"overall_drain_msg_s", float64(total-1)/last.Sub(first).Seconds(),
		"fresh_ingest_msg_s", freshRate, "fresh_vs_outage_ingest", freshRate/ingestRate,
		"drain_during_fresh_msg_s", drainDuringFresh,
		"paced_persist_p50_ms", pl50, "paced_persist_p99_ms", pl99,
		"paced_deliver_p50_ms", dl50, "paced_deliver_p99_ms", dl99, "backlog_left_after_paced", backlogLeft,
		"cpu_us_msg", float64(drainCPU.Microseconds())/float64(total),
		"peak_rss_idle_mib", float64(peak[1])/mib, "peak_rss_drain_mib", float64(peak[2])/mib,
		"rss_end_mib", float64(rssDrained)/mib, "hwm_mib", float64(hwm)/mib,
		"dups", dups, "disorder", disorder, "load", load)
	if disorder != 0 {
		s.mu.Lock()
		t.Errorf("%d per-key order violations, the first: %v", disorder, s.examples)
		s.mu.Unlock()
	}
	if d := b.metric("gobridge_delivery_dead_lettered_total"); d != 1 {
		t.Errorf("%v dead letters, want 1 (the poison record)", d)
	}
}
