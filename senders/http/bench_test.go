package http

import (
	"fmt"
	"net"
	nethttp "net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gobridge/gobridge/message"
	"github.com/gobridge/gobridge/routes"
)

// BenchmarkSender_Send measures requests/s against a local no-op server with
// maxInFlight concurrent Send calls sharing one Sender; conns is how many
// connections the server accepted.
func BenchmarkSender_Send(b *testing.B) { benchmarkSend(b, 0) }

// BenchmarkSender_SendSlowTarget is BenchmarkSender_Send against a target
// that takes 1ms per request, where concurrency pays.
func BenchmarkSender_SendSlowTarget(b *testing.B) { benchmarkSend(b, time.Millisecond) }

func benchmarkSend(b *testing.B, latency time.Duration) {
	var conns atomic.Int64
	srv := httptest.NewUnstartedServer(nethttp.HandlerFunc(func(w nethttp.ResponseWriter, r *nethttp.Request) {
		if latency > 0 {
			time.Sleep(latency) // the target's service time, not synchronisation
		}
	}))
	srv.Config.ConnState = func(_ net.Conn, st nethttp.ConnState) {
		if st == nethttp.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	payload := []byte(`{"temp":21.5,"line":"line-7","seq":123456}`)
	for _, inFlight := range []int{1, 16, 64} {
		b.Run(fmt.Sprintf("max_in_flight=%d", inFlight), func(b *testing.B) {
			s, err := New(routes.SenderConfig{ID: "bench", Options: routes.SenderOptions{URL: srv.URL + "/ingest/{topic.1}"}}, inFlight, nil)
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			var next atomic.Int64
			var wg sync.WaitGroup
			b.ResetTimer()
			for range inFlight {
				wg.Go(func() {
					env := &message.Envelope{ID: message.NewID(), Topic: "factory/line-7/telemetry", Payload: payload}
					envs := []*message.Envelope{env}
					for next.Add(1) <= int64(b.N) {
						if err := s.Send(b.Context(), envs)[0]; err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "req/s")
			b.ReportMetric(float64(conns.Swap(0)), "conns")
		})
	}
}
