package receivers

import (
	"context"
	"sync"
	"sync/atomic"

	"golang.org/x/sync/semaphore"
)

// Window bounds the payload bytes one receiver holds unacknowledged
// (max_inflight_bytes) and keeps the receiver's counters, which Stats
// reports. A receiver has one Window; its Ackers (the listener has one per
// publisher connection) share it. It is safe for concurrent use.
type Window struct {
	bytes *semaphore.Weighted
	max   int64

	Received, Acked, Dropped, Unrouted, Abandoned, Reconnects, TooLarge, Denied, Malformed, Busy atomic.Uint64
	InFlight, inFlightBytes                                                                      atomic.Int64
}

// NewWindow returns a window of maxBytes payload bytes;
// DefaultMaxInflightBytes when maxBytes <= 0.
func NewWindow(maxBytes int) *Window {
	if maxBytes <= 0 {
		maxBytes = DefaultMaxInflightBytes
	}
	return &Window{bytes: semaphore.NewWeighted(int64(maxBytes)), max: int64(maxBytes)}
}

// Stats returns the counters.
func (w *Window) Stats() Stats {
	return Stats{
		Received: w.Received.Load(), Acked: w.Acked.Load(), Dropped: w.Dropped.Load(),
		Unrouted: w.Unrouted.Load(), Abandoned: w.Abandoned.Load(), Reconnects: w.Reconnects.Load(),
		TooLarge: w.TooLarge.Load(), Denied: w.Denied.Load(), Malformed: w.Malformed.Load(), Busy: w.Busy.Load(),
		InFlight: int(w.InFlight.Load()), InFlightBytes: w.inFlightBytes.Load(),
	}
}

// Hold takes n bytes of the window, waiting while it is full until ctx
// ends (then it returns ctx's error). Release gives them back.
func (w *Window) Hold(ctx context.Context, n int64) error {
	if err := w.bytes.Acquire(ctx, n); err != nil {
		return err
	}
	w.inFlightBytes.Add(n)
	return nil
}

// Release gives back n bytes taken by Hold; the counter goes down first, so
// that it never shows more than the window holds.
func (w *Window) Release(n int64) {
	w.inFlightBytes.Add(-n)
	w.bytes.Release(n)
}

// NewAcker returns an Acker holding at most capacity unacknowledged
// messages, whose payload bytes count against w.
func (w *Window) NewAcker(capacity int) *Acker {
	return &Acker{w: w, slots: make(chan struct{}, capacity), queue: make(chan *pending, capacity)}
}

// Acker acknowledges messages in the order they were added, each only once
// it and every message added before it were settled (MQTT 3.1.1 §4.6).
type Acker struct {
	w     *Window
	slots chan struct{} // one per message added and not yet acknowledged
	queue chan *pending // in the order added; never blocks (a slot is held)

	mu      sync.Mutex
	stopped bool // Run has returned: Add refuses
}

type pending struct {
	ack    func()
	weight int64
	done   chan struct{}
	once   sync.Once
}

func (p *pending) settle() { p.once.Do(func() { close(p.done) }) }

// Add queues a message of size payload bytes behind every message added
// before it and returns its done callback, which may be called from any
// goroutine, more than once. Run calls ack once the message and every
// earlier one were settled.
//
// When the acker holds its capacity or the window is full, Add waits if wait
// is true (and returns nil when ctx ends first); with wait false it counts
// the message in Stats.Dropped and returns nil at once. It also returns nil
// once Run has returned. A message for which Add returned nil is not
// queued: the caller must not hand it to the sink. Calls to Add must not
// overlap: their order is the acknowledgement order.
func (a *Acker) Add(ctx context.Context, size int, wait bool, ack func()) func() {
	weight := min(int64(size), a.w.max)
	if wait {
		select {
		case a.slots <- struct{}{}:
		case <-ctx.Done():
			return nil
		}
		if a.w.Hold(ctx, weight) != nil {
			<-a.slots
			return nil
		}
	} else {
		select {
		case a.slots <- struct{}{}:
		default:
			a.w.Dropped.Add(1)
			return nil
		}
		if !a.w.bytes.TryAcquire(weight) {
			<-a.slots
			a.w.Dropped.Add(1)
			return nil
		}
		a.w.inFlightBytes.Add(weight)
	}
	p := &pending{ack: ack, weight: weight, done: make(chan struct{})}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.stopped {
		a.w.Release(weight)
		<-a.slots
		return nil
	}
	a.w.InFlight.Add(1)
	a.queue <- p
	return p.settle
}

// Run acknowledges until ctx is done; the owner of the acker runs it once,
// in its own goroutine. A message settled by the time Run sees ctx end is
// still acknowledged; the rest are abandoned (counted in
// Stats.Abandoned, their room released): never acknowledged, so the
// publisher or broker sends them again.
func (a *Acker) Run(ctx context.Context) {
	for {
		var p *pending
		select {
		case p = <-a.queue:
		case <-ctx.Done():
			a.abandon(nil)
			return
		}
		select {
		case <-p.done:
		case <-ctx.Done():
			select {
			case <-p.done: // settled just in time
			default:
				a.abandon(p)
				return
			}
		}
		p.ack()
		a.release(p)
		a.w.Acked.Add(1)
	}
}

func (a *Acker) release(p *pending) {
	a.w.InFlight.Add(-1)
	a.w.Release(p.weight)
	<-a.slots
}

// abandon releases held (if any) and everything still queued, and makes Add
// refuse from now on.
func (a *Acker) abandon(held *pending) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.stopped = true
	for {
		if held != nil {
			a.release(held)
			a.w.Abandoned.Add(1)
		}
		select {
		case held = <-a.queue:
		default:
			return
		}
	}
}
