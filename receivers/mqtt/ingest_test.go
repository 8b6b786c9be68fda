package mqtt

import (
	"context"
	"slices"
	"sync"
	"testing"

	"github.com/gobridge/gobridge/receivers"
	"github.com/gobridge/gobridge/receivers/internal/testsink"
)

func TestPipeline_AcksInArrivalOrderWhenSettledOutOfOrder(t *testing.T) {
	t.Parallel()
	sink := testsink.New(false)
	p := newPipeline(sink, 100)
	var mu sync.Mutex
	var acked []int
	ctx, cancel := context.WithCancel(t.Context())
	quit := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { p.dispatch(ctx) })
	wg.Go(func() { p.ackLoop(quit) })
	t.Cleanup(func() { cancel(); close(quit); wg.Wait() })

	const n = 20
	for i := range n {
		p.offer(&item{
			msg:  receivers.Message{QoS: 1, Payload: []byte{byte(i)}},
			ack:  func() { mu.Lock(); acked = append(acked, i); mu.Unlock() },
			done: make(chan struct{}),
		})
	}
	var ds []testsink.Delivery
	for range n {
		ds = append(ds, sink.Next(t))
	}
	// Settle all but the first, last first: nothing may be acknowledged.
	for i := n - 1; i >= 1; i-- {
		ds[i].Done()
	}
	mu.Lock()
	if len(acked) != 0 {
		t.Fatalf("acked %v before message 0 was settled", acked)
	}
	mu.Unlock()
	ds[0].Done()
	ds[0].Done() // a second call is harmless
	testsink.Eventually(t, "all acked", func() bool { mu.Lock(); defer mu.Unlock(); return len(acked) == n })
	mu.Lock()
	defer mu.Unlock()
	if !slices.IsSorted(acked) {
		t.Fatalf("ack order %v", acked)
	}
	if p.inFlight() != 0 || p.acked.Load() != n {
		t.Fatalf("inFlight %d acked %d", p.inFlight(), p.acked.Load())
	}
}

func TestPipeline_DropsQoS0WhenFullAndBlocksQoS1(t *testing.T) {
	t.Parallel()
	p := newPipeline(testsink.New(true), 2) // nothing dispatches: the queue fills
	newItem := func(qos byte) *item {
		return &item{msg: receivers.Message{QoS: qos}, ack: func() {}, done: make(chan struct{})}
	}
	if !p.offer(newItem(0)) || !p.offer(newItem(1)) {
		t.Fatal("offer into an empty pipeline failed")
	}
	if p.offer(newItem(0)) {
		t.Fatal("a QoS 0 message was queued into a full pipeline")
	}
	if p.dropped.Load() != 1 {
		t.Fatalf("dropped = %d", p.dropped.Load())
	}
	blocked := make(chan bool)
	go func() { blocked <- p.offer(newItem(1)) }()
	select {
	case <-blocked:
		t.Fatal("a QoS 1 offer into a full pipeline returned at once")
	default:
	}
	p.stop()
	if <-blocked {
		t.Fatal("a blocked QoS 1 offer was queued after stop")
	}
	if p.received.Load() != 2 {
		t.Fatalf("received = %d", p.received.Load())
	}
}
