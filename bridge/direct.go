package bridge

import (
	"context"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gobridge/gobridge/drainer"
	"github.com/gobridge/gobridge/message"
	"github.com/gobridge/gobridge/receivers"
	"github.com/gobridge/gobridge/senders"
	"github.com/prometheus/client_golang/prometheus"
)

// holder delivers a direct_hold route's messages while the source waits
// (through its lanes), settling each once the target accepted it or
// on_permanent_failure settled it. Transient and capacity errors are
// retried with the route's backoff for as long as the process runs, one
// probe per backoff step while the sender is down: the unacknowledged
// source makes the broker's flow control push back on publishers. Nothing
// is poisoned here. At shutdown the message is left unacknowledged, so the
// broker redelivers it.
type holder struct {
	b     *Bridge
	r     *route
	lanes lanes

	mu      sync.Mutex
	started map[*message.Envelope]time.Time
}

// submit starts the delivery of env (see lanes.start); settle is called
// when it has settled.
func (h *holder) submit(ctx context.Context, env *message.Envelope, received message.Envelope, settle settleFunc) bool {
	return h.lanes.start(ctx, h.r, env.Key, func() {
		h.mu.Lock()
		h.started[env] = time.Now()
		h.mu.Unlock()
		outcome := h.deliver(env, received)
		h.mu.Lock()
		delete(h.started, env)
		h.mu.Unlock()
		if outcome != "" {
			settle(outcome)
		}
	})
}

// lanes runs a route's sends in goroutines the route owns: at most
// max_in_flight at once and, per ordering key, one at a time in arrival
// order. A message behind another of its key waits without a slot (the
// goroutine sending the key runs its next message), so a key whose target
// keeps failing holds one slot, not all of them; what waits is bounded by
// the receivers' windows. Goroutines are reused until the route quits: one
// per message cost its start and stack growth every time.
type lanes struct {
	sem   chan struct{}    // one per goroutine
	idle  chan chan func() // a goroutine waiting for its next send
	sends atomic.Int64     // in flight
	inUse prometheus.Gauge // sends in flight, when this route's to report

	mu   sync.Mutex
	keys map[string][]*waiting // per key in delivery: the messages waiting behind it
}

// waiting is a message queued behind its key. It leaves the queue when the
// ctx it was started with ends first: its source stopped waiting for it
// (an http_listener request answered 503, a listener connection closed),
// gave back the room it held in the receiver's window, and sends it again;
// kept, it would hold its payload for as long as the key's target is down,
// one more for every retry.
type waiting struct {
	fn   func()
	stop func() bool // ends the watch on its ctx
}

func newLanes(r *route, inUse prometheus.Gauge) lanes {
	return lanes{sem: make(chan struct{}, r.policy.MaxInFlight), idle: make(chan chan func()), inUse: inUse, keys: map[string][]*waiting{}}
}

// start runs fn once no message of key is ahead of it, in a goroutine
// holding a slot; when r quits first, fn does not run. It returns false
// when ctx ended while it waited for a slot (the message was not taken).
func (l *lanes) start(ctx context.Context, r *route, key string, fn func()) bool {
	if key != "" {
		l.mu.Lock()
		if q, ok := l.keys[key]; ok { // behind a message of its key: no slot
			w := &waiting{fn: fn}
			l.keys[key] = append(q, w)
			r.busy.Add(1)
			w.stop = context.AfterFunc(ctx, func() { l.leave(r, key, w) })
			l.mu.Unlock()
			return true
		}
		l.keys[key] = nil // in delivery
		l.mu.Unlock()
	}
	if !l.acquire(ctx.Done(), r, key, fn) {
		if key != "" {
			l.handOff(r, key)
		}
		return false
	}
	return true
}

// acquire waits for a goroutine and hands it fn and the messages queued
// behind it on key; false when done was closed first.
func (l *lanes) acquire(done <-chan struct{}, r *route, key string, fn func()) bool {
	var w chan func() // an idle goroutine's; nil: start one
	select {
	case w = <-l.idle:
	default:
		select {
		case w = <-l.idle:
		case l.sem <- struct{}{}:
		case <-done:
			return false
		}
	}
	r.busy.Add(1)
	send := func() { l.run(r, key, fn) }
	if w != nil {
		w <- send
	} else {
		r.workers.Add(1)
		go l.work(r, send)
	}
	return true
}

// leave takes w out of key's queue, unless it was taken to be sent.
func (l *lanes) leave(r *route, key string, w *waiting) {
	l.mu.Lock()
	q := l.keys[key]
	i := slices.Index(q, w)
	if i >= 0 {
		l.keys[key] = slices.Delete(q, i, i+1)
	}
	l.mu.Unlock()
	if i >= 0 {
		r.busy.Done() // counted when it queued
	}
}

// next takes the first message of key's queue (the caller checked there
// is one). Called holding mu.
func (l *lanes) next(key string) func() {
	q := l.keys[key]
	w := q[0]
	l.keys[key] = q[1:]
	w.stop()
	return w.fn
}

// handOff is called when the head message of key gave up its wait for a
// slot: the messages accepted behind it wait in a goroutine the route owns.
func (l *lanes) handOff(r *route, key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	q := l.keys[key]
	if len(q) == 0 {
		delete(l.keys, key)
		return
	}
	fn := l.next(key)
	r.workers.Add(1)
	go func() {
		defer r.workers.Done()
		defer r.busy.Done() // fn was counted when it queued; acquire counts it again
		if !l.acquire(r.quit, r, key, fn) {
			l.run(r, key, nil) // quitting: drop the key's messages
		}
	}()
}

// run sends fn (nil: none), then the messages queued behind it on key, one
// at a time, until none is left or r quits (those left stay unacknowledged).
func (l *lanes) run(r *route, key string, fn func()) {
	for {
		if fn != nil {
			select {
			case <-r.quit:
			default:
				l.count(1)
				fn()
				l.count(-1)
			}
			r.busy.Done()
		}
		if key == "" {
			return
		}
		l.mu.Lock()
		q := l.keys[key]
		if len(q) == 0 {
			delete(l.keys, key)
			l.mu.Unlock()
			return
		}
		fn = l.next(key)
		l.mu.Unlock()
	}
}

// work runs send, then the sends handed to it, until r quits.
func (l *lanes) work(r *route, send func()) {
	defer r.workers.Done()
	defer func() { <-l.sem }()
	mine := make(chan func(), 1)
	for {
		send()
		select {
		case l.idle <- mine:
			send = <-mine
		case <-r.quit:
			return
		}
	}
}

func (l *lanes) count(d int64) {
	n := l.sends.Add(d)
	if l.inUse != nil {
		l.inUse.Set(float64(n))
	}
}

// heldSince is when the oldest message in delivery started (zero: none).
func (h *holder) heldSince() time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	var oldest time.Time
	for _, t := range h.started {
		if oldest.IsZero() || t.Before(oldest) {
			oldest = t
		}
	}
	return oldest
}

// deliver sends env until the target accepts it or it fails permanently,
// and returns the outcome; "" when shutdown interrupted it.
func (h *holder) deliver(env *message.Envelope, received message.Envelope) string {
	b, r := h.b, h.r
	rnd := rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	attempt := 1
	for ; h.waitProbe(); attempt++ {
		class, retryAfter, err := b.sendDirect(r, env, r.policy.SendTimeout)
		switch class {
		case senders.OK:
			return receivers.OutcomeDelivered
		case senders.Fatal:
			received.ID = env.ID
			durable := make(chan string, 1)
			if !b.failAtIngest(r.ctx, r, received, err.Error(), false, func(o string) { durable <- o }) {
				return ""
			}
			select {
			case o := <-durable:
				return o
			case <-r.ctx.Done():
				return ""
			}
		}
		b.metrics.retried.WithLabelValues(r.id, class.String()).Inc()
		wait := time.Until(r.policy.Backoff.Next(time.Now(), attempt, retryAfter, rnd))
		b.log.Debug("send failed; retrying while holding the source",
			"route", r.id, "record_id", env.ID, "attempt", attempt, "error", err, "retry_in", wait)
		if !sleep(r.quit, wait) {
			break
		}
	}
	b.log.Info("shutdown: message left unacknowledged for redelivery", "route", r.id, "record_id", env.ID, "attempt", attempt)
	return ""
}

// sendDirect makes one send of env on r within timeout (cut short when r's
// ctx ends) and records its duration, the sender's health and a success.
func (b *Bridge) sendDirect(r *route, env *message.Envelope, timeout time.Duration) (senders.Class, time.Duration, error) {
	ctx, cancel := context.WithTimeout(r.ctx, timeout)
	start := time.Now()
	err := r.sender.Send(ctx, []*message.Envelope{env})[0]
	cancel()
	now := time.Now()
	r.sendSeconds.Observe(now.Sub(start).Seconds())
	r.health.Record(env.ID, err, now, r.policy.Backoff.Ceiling)
	class, retryAfter := senders.Classify(err)
	if class == senders.OK {
		r.sent.Inc()
		b.lastSent.Store(r.session, now)
		if r.hold == nil { // direct_or_outbox: the console shows its direct deliveries with its drainer's
			b.journal.Sent(r.session, now)
			b.journal.Delivered(drainer.Outcome{Session: r.session, Route: r.id, ID: env.ID,
				Result: drainer.ResultOK, Attempt: 1, Latency: now.Sub(start), At: now})
		}
	}
	return class, retryAfter, err
}

// waitProbe waits until this message may go (the sender is up, or it is
// the probe); it returns false at shutdown.
func (h *holder) waitProbe() bool {
	for {
		ok, wait := h.r.health.Probe(time.Now())
		if ok {
			return true
		}
		if wait <= 0 || wait > time.Second {
			wait = min(max(wait, 50*time.Millisecond), time.Second)
		}
		if !sleep(h.r.quit, wait) {
			return false
		}
	}
}

// sleep waits d or until stop is closed; it reports whether d passed.
func sleep(stop <-chan struct{}, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-stop:
		return false
	}
}
