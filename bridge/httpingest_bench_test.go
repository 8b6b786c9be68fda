package bridge

import (
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkConfirmedIngest measures confirmed ingest into a shared_outbox
// route on a SQLite outbox (sync: full): 16 producers each send a message
// and wait for its confirm (the HTTP answer, or the MQTT PUBACK) before the
// next. b.N is the number of messages. It reports messages and requests
// per second and the confirm latency percentiles per request:
//
//	go test -run '^$' -bench ConfirmedIngest -benchtime 20000x ./bridge
func BenchmarkConfirmedIngest(b *testing.B) {
	b.Run("http_single", func(b *testing.B) { benchConfirmedIngest(b, 1, false) })
	b.Run("http_batch100", func(b *testing.B) { benchConfirmedIngest(b, 100, false) })
	b.Run("mqtt_listener_qos1", func(b *testing.B) { benchConfirmedIngest(b, 1, true) })
}

func benchConfirmedIngest(b *testing.B, batch int, viaMQTT bool) {
	s := newSink(b)
	web, edge := freeAddr(b), freeAddr(b)
	startBridge(b, parseConfig(b, fmt.Sprintf(`version: 1
bridge: {id: bench, admin: {listen: ""}}
stores:
  outbox: {type: sqlite, options: {path: %q}}
receivers:
  - {id: web, type: http_listener, options: {listen: %q, allow_anonymous: true}, topics: [{topic: "#"}]}
  - {id: edge, type: mqtt_listener, options: {listen: %q, allow_anonymous: true}, topics: [{topic: "#", qos: 1}]}
senders:
  - {id: sink, type: http, options: {url: %q}}
routes:
  - {id: web, receiver: web, topic: "#", sender: sink, delivery_mode: shared_outbox, session: {id: web}}
  - {id: edge, receiver: edge, topic: "#", sender: sink, delivery_mode: shared_outbox, session: {id: edge}}
`, filepath.Join(b.TempDir(), "outbox.db"), web, edge, s.srv.URL)))
	waitFor(b, 10*time.Second, "the http listener", func() bool { _, err := http.Get("http://" + web + "/"); return err == nil })

	const producers = 16
	requests := max(b.N/batch, producers)
	payload := strings.Repeat("x", 200)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: producers}}
	var next atomic.Int64
	lat := make([][]time.Duration, producers)
	send := make([]func(i int) error, producers)
	for p := range producers {
		switch {
		case viaMQTT:
			c := publisher(b, "tcp://"+edge, fmt.Sprintf("bench-%d", p))
			send[p] = func(i int) error {
				tok := c.Publish(fmt.Sprintf("bench/%d", p), 1, false, fmt.Sprintf("%010d %s", i, payload))
				tok.Wait()
				return tok.Error()
			}
		case batch == 1:
			send[p] = func(i int) error {
				return postOK(client, "http://"+web+"/v1/publish/bench/"+fmt.Sprint(p), "text/plain", fmt.Sprintf("%010d %s", i, payload))
			}
		default:
			send[p] = func(i int) error {
				var body strings.Builder
				for j := range batch {
					fmt.Fprintf(&body, `{"topic":"bench/%d","payload":"%010d %s"}`+"\n", p, i*batch+j, payload)
				}
				return postOK(client, "http://"+web+"/v1/publish", "application/x-ndjson", body.String())
			}
		}
	}
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for p := range producers {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < requests; i = int(next.Add(1)) - 1 {
				t0 := time.Now()
				if err := send[p](i); err != nil {
					b.Error(err)
					return
				}
				lat[p] = append(lat[p], time.Since(t0))
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	all := slices.Concat(lat...)
	slices.Sort(all)
	if len(all) == 0 {
		return
	}
	ms := func(q float64) float64 { return float64(all[int(q*float64(len(all)-1))]) / float64(time.Millisecond) }
	b.ReportMetric(float64(requests*batch)/elapsed.Seconds(), "msg/s")
	b.ReportMetric(float64(requests)/elapsed.Seconds(), "req/s")
	b.ReportMetric(ms(0.50), "p50_ms")
	b.ReportMetric(ms(0.99), "p99_ms")
	b.ReportMetric(0, "ns/op")
}

// postOK posts body and fails unless every message in the answer is 200.
func postOK(c *http.Client, url, contentType, body string) error {
	resp, err := c.Post(url, contentType, strings.NewReader(body))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || strings.Contains(string(answer), `"status":5`) || strings.Contains(string(answer), `"status":4`) {
		return fmt.Errorf("answer %d: %.200s", resp.StatusCode, answer)
	}
	return nil
}
