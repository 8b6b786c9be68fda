package bridge

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
	dto "github.com/prometheus/client_model/go"

	"github.com/gobridge/gobridge/internal/testservices"
)

// latencySink is an HTTP target that records, per message, the time from
// publish (a UnixNano prefix of the payload) to arrival.
type latencySink struct {
	srv  *httptest.Server
	mu   sync.Mutex
	seen map[string]bool
	lat  []time.Duration
	last time.Time
	all  chan struct{}
	want int
}

func newLatencySink(b *testing.B, want int) *latencySink {
	s := &latencySink{seen: make(map[string]bool, want), all: make(chan struct{}), want: want}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		now := time.Now()
		sp := bytes.IndexByte(body, ' ')
		ts, _ := strconv.ParseInt(string(body[:max(sp, 0)]), 10, 64)
		id := string(body[sp+1 : sp+1+10])
		s.mu.Lock()
		if !s.seen[id] {
			s.seen[id] = true
			s.lat = append(s.lat, now.Sub(time.Unix(0, ts)))
			s.last = now
			if len(s.seen) == s.want {
				close(s.all)
			}
		}
		s.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	b.Cleanup(s.srv.Close)
	return s
}

// BenchmarkEndToEnd measures publisher → Mosquitto → gobridge → HTTP sink,
// with b.N QoS 1 messages of 200 bytes published as fast as paho can, for
// both delivery modes. It reports throughput (first publish to last arrival)
// and the publish-to-arrival latency percentiles. Run with a fixed count:
//
//	go test -run '^$' -bench EndToEnd -benchtime 20000x ./bridge
func BenchmarkEndToEnd(b *testing.B) {
	b.Run("bare_paho", func(b *testing.B) { benchBarePaho(b, 0) })
	for _, mode := range []string{"shared_outbox", "direct_hold"} {
		b.Run(mode, func(b *testing.B) { benchEndToEnd(b, mode, 0) })
	}
	// Paced at 2,000 msg/s: latency when gobridge keeps up, not queueing.
	b.Run("bare_paho/paced_2k", func(b *testing.B) { benchBarePaho(b, 2000) })
	for _, mode := range []string{"shared_outbox", "direct_hold"} {
		b.Run(mode+"/paced_2k", func(b *testing.B) { benchEndToEnd(b, mode, 2000) })
	}
}

// benchBarePaho is the reference: the same publisher and payloads to a bare
// paho QoS 1 subscriber (auto-ack, ordered handler) that only records
// arrival times, with no gobridge in between.
func benchBarePaho(b *testing.B, rate int) {
	mqttURL := testservices.MQTTURL(b)
	run := fmt.Sprintf("bare-%d", time.Now().UnixNano())
	var mu sync.Mutex
	lat := make([]time.Duration, 0, b.N)
	var last time.Time
	all := make(chan struct{})
	o := paho.NewClientOptions().AddBroker(mqttURL).SetClientID("sub-" + run).SetOrderMatters(true)
	sub := paho.NewClient(o)
	if tok := sub.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		b.Fatalf("connect: %v", tok.Error())
	}
	defer sub.Disconnect(100)
	tok := sub.Subscribe(run+"/#", 1, func(_ paho.Client, m paho.Message) {
		now := time.Now()
		body := m.Payload()
		sp := bytes.IndexByte(body, ' ')
		ts, _ := strconv.ParseInt(string(body[:max(sp, 0)]), 10, 64)
		mu.Lock()
		lat = append(lat, now.Sub(time.Unix(0, ts)))
		last = now
		if len(lat) == b.N {
			close(all)
		}
		mu.Unlock()
	})
	if !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		b.Fatalf("subscribe: %v", tok.Error())
	}
	pub := publisher(b, mqttURL, "pub-"+run)
	start := publishBench(b, pub, run, rate)
	select {
	case <-all:
	case <-time.After(5 * time.Minute):
		b.Fatal("not every message arrived")
	}
	b.StopTimer()
	mu.Lock()
	defer mu.Unlock()
	reportLatency(b, lat, last.Sub(start))
}

// publishBench publishes b.N QoS 1 messages of 200 bytes, each starting with
// its publish time, at rate msg/s (0: as fast as paho can), and returns when
// publishing started.
func publishBench(b *testing.B, pub paho.Client, run string, rate int) time.Time {
	pad := bytes.Repeat([]byte("x"), 200)
	b.ResetTimer()
	start := time.Now()
	for i := range b.N {
		p := fmt.Appendf(nil, "%d %010d ", time.Now().UnixNano(), i)
		p = append(p, pad[:max(0, 200-len(p))]...)
		pub.Publish(run+"/line", 1, false, p)
		if rate > 0 && i%20 == 19 {
			// Pacing the load, not synchronising: sleep until this
			// message's slot.
			time.Sleep(time.Until(start.Add(time.Duration(i+1) * time.Second / time.Duration(rate))))
		}
	}
	return start
}

func reportLatency(b *testing.B, lat []time.Duration, elapsed time.Duration) {
	slices.Sort(lat)
	pct := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))]) / 1e6 }
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "msg/s")
	b.ReportMetric(pct(0.50), "p50_ms")
	b.ReportMetric(pct(0.99), "p99_ms")
	b.ReportMetric(0, "ns/op")
}

func benchEndToEnd(b *testing.B, mode string, rate int) {
	mqttURL := testservices.MQTTURL(b)
	run := fmt.Sprintf("bench-%d", time.Now().UnixNano())
	s := newLatencySink(b, b.N)
	route := "    policy: {max_in_flight: 100}"
	if mode == "shared_outbox" {
		route = `    delivery_mode: shared_outbox
    session: {id: bench, batch_size: 200}
    policy: {max_in_flight: 100}`
	}
	cfg := parseConfig(b, fmt.Sprintf(`version: 1
bridge: {id: bench, admin: {listen: ""}}
stores:
  outbox: {type: sqlite, options: {path: %q}}
receivers:
  - id: plant
    type: mqtt
    options: {broker_urls: [%s], client_id: gobridge-%s, clean_session: true}
    topics: [{topic: "%s/#", qos: 1}]
senders:
  - {id: sink, type: http, options: {url: %q}}
routes:
  - id: bench
    receiver: plant
    topic: "%s/#"
    sender: sink
%s
`, filepath.Join(b.TempDir(), "outbox.db"), mqttURL, run, run, s.srv.URL, run, route))
	rt := startBridge(b, cfg)
	waitFor(b, 10*time.Second, "receiver subscribed", func() bool { return rt.Ready(b.Context()).Ready })
	pub := publisher(b, mqttURL, "pub-"+run)
	start := publishBench(b, pub, run, rate)
	var ingested time.Duration
	if mode == "shared_outbox" {
		persisted := rt.metrics.persisted.WithLabelValues("bench")
		waitFor(b, 5*time.Minute, "every message persisted", func() bool {
			var m dto.Metric
			_ = persisted.Write(&m)
			return m.GetCounter().GetValue() >= float64(b.N)
		})
		ingested = time.Since(start)
	}
	select {
	case <-s.all:
	case <-time.After(5 * time.Minute):
		b.Fatalf("only %d of %d messages arrived", len(s.seen), b.N)
	}
	b.StopTimer()
	s.mu.Lock()
	defer s.mu.Unlock()
	if ingested > 0 {
		b.ReportMetric(float64(b.N)/ingested.Seconds(), "persisted_msg/s")
	}
	reportLatency(b, s.lat, s.last.Sub(start))
}
