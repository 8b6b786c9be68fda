package listener

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/gobridge/gobridge/receivers"
	"github.com/gobridge/gobridge/receivers/internal/testsink"
)

// BenchmarkListener_QoS1 measures QoS 1 ingest through the embedded
// listener: b.N messages of 200 bytes from 1 or 4 asynchronous paho
// publishers, with a sink that settles at once or after 1ms (a group
// commit), until every publisher has all its PUBACKs. The hook holds each
// publisher's read loop until done, so one publisher's rate is bounded by
// 1/(sink latency).
func BenchmarkListener_QoS1(b *testing.B) {
	for _, delay := range []time.Duration{0, time.Millisecond} {
		for _, pubs := range []int{1, 4} {
			b.Run(fmt.Sprintf("settle=%s/publishers=%d", delay, pubs), func(b *testing.B) {
				sink := testsink.Func(func(_ context.Context, _ receivers.Message, done func()) {
					if delay == 0 {
						done()
						return
					}
					time.AfterFunc(delay, done)
				})
				l, err := New(Options{ID: "bench", Listen: "127.0.0.1:0", Topics: []string{"#"}}, sink, nil)
				if err != nil {
					b.Fatal(err)
				}
				ctx, cancel := context.WithCancel(context.Background())
				errc := make(chan error, 1)
				go func() { errc <- l.Run(ctx) }()
				<-l.Ready()
				defer func() { cancel(); <-errc }()
				clients := make([]paho.Client, pubs)
				for i := range clients {
					clients[i] = paho.NewClient(paho.NewClientOptions().AddBroker("tcp://" + l.Addr().String()).
						SetClientID(fmt.Sprintf("p%d", i)).SetAutoReconnect(false))
					if tok := clients[i].Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
						b.Fatal(tok.Error())
					}
					defer clients[i].Disconnect(0)
				}
				payload := strings.Repeat("x", 200)
				b.ResetTimer()
				start := time.Now()
				var wg sync.WaitGroup
				for i, c := range clients {
					n := b.N / pubs
					if i == 0 {
						n += b.N % pubs
					}
					wg.Go(func() {
						toks := make([]paho.Token, n)
						for j := range n {
							toks[j] = c.Publish(fmt.Sprintf("line/%d", i), 1, false, payload)
						}
						for _, tok := range toks {
							tok.Wait()
						}
					})
				}
				wg.Wait()
				b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "msg/s")
			})
		}
	}
}
