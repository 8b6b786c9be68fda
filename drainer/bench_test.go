package drainer

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gobridge/gobridge/message"
	"github.com/gobridge/gobridge/routes"
	"github.com/gobridge/gobridge/stores"
	"github.com/gobridge/gobridge/stores/memory"
)

// nopSender accepts everything at once.
type nopSender struct{ batch int }

func (s nopSender) BatchSize() int { return s.batch }
func (s nopSender) Send(_ context.Context, envs []*message.Envelope) []error {
	return make([]error, len(envs))
}

// countdown is an Observer that closes done after n ok outcomes.
type countdown struct {
	nopObserver
	left atomic.Int64
	done chan struct{}
}

func (c *countdown) Delivered(o Outcome) {
	if o.Result == ResultOK && c.left.Add(-1) == 0 {
		close(c.done)
	}
}

// benchBackends lists the stores BenchmarkDrainer drains; durable backends
// register themselves here from their own test files.
var benchBackends = []struct {
	name string
	open func(b *testing.B) stores.Outbox
}{
	{"memory", func(*testing.B) stores.Outbox { return memory.New() }},
}

// BenchmarkDrainer drains 100k records through a no-op sender and reports
// records/s. Run with -benchtime=1x (each iteration drains 100k records).
func BenchmarkDrainer(b *testing.B) {
	const records = 100_000
	for _, be := range benchBackends {
		for _, shape := range []struct{ parts, batch int }{{1, 100}, {4, 100}, {1, 1000}} {
			parts := shape.parts
			b.Run(fmt.Sprintf("%s/partitions=%d/batch=%d", be.name, parts, shape.batch), func(b *testing.B) {
				var elapsed time.Duration
				for b.Loop() {
					b.StopTimer()
					store := be.open(b)
					fillStore(b, store, records, parts)
					obs := &countdown{done: make(chan struct{})}
					obs.left.Store(records)
					pol := policyDefaults(routes.Policy{})
					g := New(Config{
						Session: "s", Partitions: parts, BatchSize: shape.batch, Owner: "bench",
						Routes:   map[string]Route{"r": {Sender: nopSender{batch: 1}, Policy: pol}},
						Observer: obs,
					}, store, memory.NewLeases())
					ctx, cancel := context.WithCancel(context.Background())
					errc := make(chan error, 1)
					b.StartTimer()
					start := time.Now()
					go func() { errc <- g.Run(ctx) }()
					<-obs.done
					elapsed += time.Since(start)
					b.StopTimer()
					cancel()
					if err := <-errc; err != nil {
						b.Fatal(err)
					}
					store.Close()
					b.StartTimer()
				}
				b.ReportMetric(float64(records)*float64(b.N)/elapsed.Seconds(), "records/s")
			})
		}
	}
}

func fillStore(b *testing.B, store stores.Outbox, records, parts int) {
	b.Helper()
	recs := make([]stores.Record, 0, 1000)
	for i := range records {
		id := message.NewID()
		recs = append(recs, stores.Record{Session: "s", Partition: stores.PartitionOf(id, parts),
			Route: "r", Envelope: message.Envelope{ID: id, Topic: "t", Payload: []byte(`{"temp":21}`)}})
		if len(recs) == cap(recs) || i == records-1 {
			if err := store.Append(context.Background(), recs...); err != nil {
				b.Fatal(err)
			}
			recs = recs[:0]
		}
	}
}

// BenchmarkStoreBaseline drains the same 100k records with bare Claim and
// Complete calls (one partition): the most any drainer can
// get out of the store. Compare it with BenchmarkDrainer/*/partitions=1/batch=100.
func BenchmarkStoreBaseline(b *testing.B) {
	const records = 100_000
	for _, be := range benchBackends {
		for _, batch := range []int{100, 1000} {
			b.Run(fmt.Sprintf("%s/batch=%d", be.name, batch), func(b *testing.B) {
				var elapsed time.Duration
				for b.Loop() {
					b.StopTimer()
					store := be.open(b)
					fillStore(b, store, records, 1)
					b.StartTimer()
					start := time.Now()
					for left := records; left > 0; {
						now := time.Now()
						recs, err := store.Claim(context.Background(), stores.ClaimRequest{Session: "s", Token: 1,
							Limit: batch, Now: now, Until: now.Add(time.Minute)})
						if err != nil || len(recs) == 0 {
							b.Fatalf("claim: %d records, %v", len(recs), err)
						}
						if err := store.Complete(context.Background(), recs...); err != nil {
							b.Fatal(err)
						}
						left -= len(recs)
					}
					elapsed += time.Since(start)
					b.StopTimer()
					store.Close()
					b.StartTimer()
				}
				b.ReportMetric(float64(records)*float64(b.N)/elapsed.Seconds(), "records/s")
			})
		}
	}
}
