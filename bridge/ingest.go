package bridge

import (
	"cmp"
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gobridge/gobridge/message"
	"github.com/gobridge/gobridge/receivers"
	"github.com/gobridge/gobridge/routes"
	"github.com/gobridge/gobridge/stores"
	"github.com/gobridge/gobridge/topics"
)

// ingest is the receivers.Sink of one receiver: it matches each message
// against the receiver's routes, runs each route's processors on the
// route's own envelope and hands it to the route's delivery mode. done is
// called once every matched route has settled the message.
type ingest struct {
	b        *Bridge
	receiver string

	mu     sync.RWMutex
	routes []*route      // replaced by a reload
	held   chan struct{} // while a reload holds new messages (see hold); closed by release
}

// hold makes Accept wait, before it matches a message, until release; once
// it returns, every message matched so far counts in its routes' busy.
func (in *ingest) hold() {
	in.mu.Lock()
	if in.held == nil {
		in.held = make(chan struct{})
	}
	in.mu.Unlock()
}

// release ends a hold.
func (in *ingest) release() {
	in.mu.Lock()
	if in.held != nil {
		close(in.held)
		in.held = nil
	}
	in.mu.Unlock()
}

// set makes ingest route through rs from the next message on.
func (in *ingest) set(rs []*route) {
	in.mu.Lock()
	in.routes = rs
	in.mu.Unlock()
}

var _ receivers.Sink = (*ingest)(nil)

// settleFunc is called once a route has settled a message (receivers.Outcome*).
type settleFunc func(outcome string)

// Accept implements receivers.Sink. It blocks while a route's session is
// at its limits or a direct_hold route has max_in_flight sends out, and
// returns early, without calling done (so the message is not acknowledged
// and the broker redelivers it), when ctx is done.
func (in *ingest) Accept(ctx context.Context, m receivers.Message, done func()) {
	mt := in.b.metrics
	mt.received.WithLabelValues(in.receiver).Inc()
	var matched []*route
	in.mu.RLock()
	for held := in.held; held != nil; held = in.held {
		in.mu.RUnlock()
		select {
		case <-held:
		case <-ctx.Done():
			return
		}
		in.mu.RLock()
	}
	for _, r := range in.routes {
		if topics.Match(r.cfg.Topic, m.Topic) {
			r.busy.Add(1) // before a reload can swap the routes and wait for them
			matched = append(matched, r)
		}
	}
	in.mu.RUnlock()
	// settled runs once the last matched route settles; Report gets the
	// first route's ID and outcome.
	var firstID string
	var first atomic.Pointer[string]
	var left atomic.Int32
	settled := func() {
		mt.acked.WithLabelValues(in.receiver).Inc()
		if m.Report != nil {
			outcome := receivers.OutcomeUnrouted
			if o := first.Load(); o != nil {
				outcome = *o
			}
			m.Report(receivers.Settled{ID: firstID, Outcome: outcome})
		}
		done()
	}
	if len(matched) == 0 {
		mt.unmatched.WithLabelValues(in.receiver).Inc()
		settled()
		return
	}
	var tooLarge string
	if m.Truncated {
		tooLarge = fmt.Sprintf("%s: %d bytes, sha256 %s; the first %d bytes are kept",
			receivers.ReasonPayloadTooLarge, m.Size, m.SHA256, len(m.Payload))
	}
	left.Store(int32(len(matched)))
	for i, r := range matched {
		env := message.Envelope{ID: m.ID, Topic: m.Topic, Payload: m.Payload, Headers: m.Headers, QoS: m.QoS, ReceivedAt: m.ReceivedAt}
		if env.ID == "" {
			env.ID = message.NewID()
		}
		var id *string // the first route's ID, as its processors leave it
		if i == 0 {
			firstID, id = env.ID, &firstID
		}
		ok := in.b.dispatch(ctx, r, env, id, tooLarge, func(outcome string) {
			if i == 0 {
				first.Store(&outcome)
			}
			if left.Add(-1) == 0 {
				settled()
			}
		})
		r.busy.Done()
		if !ok {
			for _, r := range matched[i+1:] {
				r.busy.Done()
			}
			return
		}
	}
}

// dispatch runs env through route r (processors, then its delivery mode)
// and arranges for settle to be called once it has settled; id, when not
// nil, gets the envelope ID the processors gave it. It returns false, and
// settle is not called, when ctx ended first. A truncated message (tooLarge
// is its reason) is never routed but failed at ingest (DESIGN.md §11.1).
func (b *Bridge) dispatch(ctx context.Context, r *route, env message.Envelope, id *string, tooLarge string, settle settleFunc) bool {
	if r.ready != nil {
		select {
		case <-r.ready: // the route this one replaced has settled
		case <-ctx.Done():
			return false
		}
	}
	mt := b.metrics
	mt.routeReceived.WithLabelValues(r.id).Inc()
	settleRoute := func(outcome string) {
		mt.routeAcked.WithLabelValues(r.id).Inc()
		settle(outcome)
	}
	if tooLarge != "" {
		return b.failAtIngest(ctx, r, env, tooLarge, true, settleRoute)
	}
	received := env // an ingest dead letter keeps the message as it arrived
	res, err := r.chain.Process(&env)
	if err != nil {
		return b.failAtIngest(ctx, r, received, "processor: "+err.Error(), false, settleRoute)
	}
	if id != nil {
		*id = env.ID
	}
	if res.Drop {
		mt.filtered.WithLabelValues(r.id).Inc()
		settleRoute(receivers.OutcomeFiltered)
		return true
	}
	switch r.cfg.DeliveryMode {
	case routes.DirectHold:
		return r.hold.submit(ctx, &env, received, settleRoute)
	case routes.DirectOrOutbox:
		return r.fallback.submit(ctx, &env, received, res.CoalesceKey, settleRoute)
	}
	return b.persist(ctx, r.record(&env, res.CoalesceKey), settleRoute, nil)
}

// record is env as a live record of r, placed by its ordering key, else
// its coalesce key (a partition's drainer coalesces only what it holds, so
// the records of one coalesce key must meet there), else its ID.
func (r *route) record(env *message.Envelope, coalesceKey string) stores.Record {
	rec := stores.Record{
		Session: r.session, Route: r.id, Envelope: *env, CoalesceKey: coalesceKey,
		Partition: stores.PartitionOf(cmp.Or(env.Key, coalesceKey, env.ID), r.partitions),
	}
	if ttl := r.cfg.Policy.TTL.D(); ttl > 0 {
		rec.ExpiresAt = env.ReceivedAt.Add(ttl)
	}
	return rec
}

// persist admits rec (waiting while its limits are reached) and queues it
// for the group commit; settle is called once it is durable, after written
// (when not nil) learns whether the store inserted rec.
func (b *Bridge) persist(ctx context.Context, rec stores.Record, settle settleFunc, written func(inserted bool)) bool {
	if !b.limits.admit(ctx, &rec, func(d time.Duration) {
		b.metrics.backpressure.WithLabelValues(rec.Session).Add(d.Seconds())
	}) {
		return false
	}
	b.writer.add(rec, func(stored *stores.Record, err error) {
		if written != nil {
			written(stored != nil)
		}
		switch {
		case err != nil:
		case rec.State == stores.Dead || stored != nil && stored.State == stores.Dead: // or kept as its truncated dead letter
			settle(receivers.OutcomeDeadLettered)
		default:
			settle(receivers.OutcomeCommitted)
		}
	})
	return true
}

// failAtIngest settles a message that cannot be delivered as it is (a
// processor error, a payload over max_payload_bytes, a permanent failure of
// a direct send) by on_permanent_failure: an ingest dead letter of the
// message as it arrived (Raw: a requeue runs the processors again), or a
// drop when the policy or the lack of an outbox store says so.
func (b *Bridge) failAtIngest(ctx context.Context, r *route, received message.Envelope, reason string, truncated bool, settle settleFunc) bool {
	log := b.log.With("route", r.id, "record_id", received.ID)
	if !r.dlq {
		b.metrics.dropped.WithLabelValues(r.id).Inc()
		log.Warn("message dropped", "error", reason)
		settle(receivers.OutcomeDropped)
		return true
	}
	rec := stores.Record{
		Session: r.session, Route: r.id, Envelope: received, Raw: true, Truncated: truncated,
		State: stores.Dead, DeadReason: reason, LastError: reason, DeadAt: time.Now(),
		Partition: stores.PartitionOf(received.ID, r.partitions),
	}
	log.Warn("message dead-lettered at ingest", "error", reason)
	return b.persist(ctx, rec, func(outcome string) {
		b.metrics.deadLettered.WithLabelValues(r.id).Inc()
		settle(outcome)
	}, nil)
}
