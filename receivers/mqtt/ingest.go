package mqtt

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gobridge/gobridge/receivers"
)

// DefaultMaxInFlight is the hard cap on messages received and not yet
// acknowledged, whatever the broker's own in-flight window is.
const DefaultMaxInFlight = 10_000

// item is one received message on its way through the ingest pipeline.
type item struct {
	msg  receivers.Message
	ack  func() // sends PUBACK/PUBREC; a no-op for QoS 0
	done chan struct{}
	once sync.Once
}

func (it *item) settle() { it.once.Do(func() { close(it.done) }) }

// pipeline is gobridge's own bounded, ordered ingest queue. paho's handler
// offers messages in arrival order; dispatch hands them to the sink in that
// order; ack acknowledges them in that order, each only after its done.
//
// slots bounds everything offered and not yet acknowledged: offer takes a
// slot, ack gives it back. Both channels have the capacity of slots, so
// sending on them never blocks.
type pipeline struct {
	sink       receivers.Sink
	slots      chan struct{}
	toDispatch chan *item
	toAck      chan *item
	stopping   chan struct{} // closed when ingest stops: offer refuses
	stopOnce   sync.Once

	// onAck, when set (tests), is called after each acknowledgement.
	onAck func(receivers.Message)

	received, acked, dropped, abandoned atomic.Uint64
	dispatchedUnacked                   atomic.Int64
}

func newPipeline(sink receivers.Sink, limit int) *pipeline {
	return &pipeline{
		sink:       sink,
		slots:      make(chan struct{}, limit),
		toDispatch: make(chan *item, limit),
		toAck:      make(chan *item, limit),
		stopping:   make(chan struct{}),
	}
}

// offer queues a message. For QoS 1 and 2 it blocks while the pipeline is
// full (the broker's in-flight window normally keeps it from filling) and
// gives up, leaving the message unacknowledged, when ingest stops. A QoS 0
// message is dropped and counted when the pipeline is full. offer reports
// whether the message was queued.
func (p *pipeline) offer(it *item) bool {
	select {
	case <-p.stopping:
		return false
	default:
	}
	if it.msg.QoS == 0 {
		select {
		case p.slots <- struct{}{}:
		default:
			p.dropped.Add(1)
			return false
		}
	} else {
		select {
		case p.slots <- struct{}{}:
		case <-p.stopping:
			return false
		}
	}
	p.received.Add(1)
	p.toDispatch <- it
	return true
}

// stop makes offer refuse new messages and dispatch stop.
func (p *pipeline) stop() { p.stopOnce.Do(func() { close(p.stopping) }) }

// dispatch hands queued messages to the sink in order until ctx is done or
// the pipeline stops. Messages still queued then are never handed over.
func (p *pipeline) dispatch(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-p.stopping:
			return
		case it := <-p.toDispatch:
			p.dispatchedUnacked.Add(1)
			p.toAck <- it
			p.sink.Accept(ctx, it.msg, it.settle)
		}
	}
}

// ackLoop acknowledges dispatched messages strictly in arrival order: the
// acknowledgement of message k+1 waits for the done of message k. It
// returns when quit is closed.
func (p *pipeline) ackLoop(quit <-chan struct{}) {
	for {
		var it *item
		select {
		case <-quit:
			return
		case it = <-p.toAck:
		}
		select {
		case <-quit:
			return
		case <-it.done:
		}
		it.ack()
		p.acked.Add(1)
		p.dispatchedUnacked.Add(-1)
		<-p.slots
		if p.onAck != nil {
			p.onAck(it.msg)
		}
	}
}

// drain waits, up to grace, until every dispatched message is acknowledged.
func (p *pipeline) drain(grace time.Duration) {
	deadline := time.NewTimer(grace)
	defer deadline.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for p.dispatchedUnacked.Load() > 0 {
		select {
		case <-deadline.C:
			return
		case <-tick.C:
		}
	}
}

// inFlight is the number of messages offered and not yet acknowledged.
func (p *pipeline) inFlight() int { return len(p.slots) }
