package e2e

// The load and the target of the process-level benchmarks: numbered,
// timestamped 200-byte payloads, the publisher that sends them through
// Mosquitto, the HTTP sink that checks what arrives (first arrivals,
// latency, duplicates, per-key order, the poison record), and a plain HTTP
// load generator that measures the sink's own rate.

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
)

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
// counted. With a delay, every answer waits that long first, as a target
// across a WAN does.
type benchSink struct {
	srv    *httptest.Server
	keys   int
	poison int // -1: none
	delay  time.Duration
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
	if s.delay > 0 {
		time.Sleep(s.delay)
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
// It also reports the CPU this process spent per request, the sink's and
// the load generator's together: what the two sides of one request cost.
func loadGen(t *testing.T, s *benchSink, conc int, d time.Duration) float64 {
	t.Helper()
	cpu0 := procCPU(t, os.Getpid())
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
	reqs := float64(s.loadReqs.Load() - before)
	report(t, "loadgen", "conc", conc, "req_s", reqs/time.Since(start).Seconds(),
		"cpu_us_req", float64((procCPU(t, os.Getpid())-cpu0).Microseconds())/reqs)
	return reqs / time.Since(start).Seconds()
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
