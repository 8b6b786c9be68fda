package bridge

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/gobridge/gobridge/message"
	"github.com/gobridge/gobridge/receivers"
	"github.com/gobridge/gobridge/routes"
	"github.com/gobridge/gobridge/stores"
	"github.com/gobridge/gobridge/topics"
)

// ingest is the receivers.Sink of one receiver: it matches the message
// against the receiver's routes, runs each route's processors and hands the
// route's own envelope to its delivery mode. done is called once every
// matched route has settled its message.
type ingest struct {
	rt       *Runtime
	receiver string
	routes   []*route
}

// settler calls done when the last of n deliveries settles.
type settler struct {
	left atomic.Int32
	done func()
}

func (s *settler) settle() {
	if s.left.Add(-1) == 0 {
		s.done()
	}
}

// Accept implements receivers.Sink. It blocks while a shared_outbox session
// is at max_outbox_depth or a direct_hold route has max_in_flight sends
// outstanding, and returns early (without calling done, so the message is
// never acknowledged and the broker redelivers it) when ctx is done.
func (in *ingest) Accept(ctx context.Context, m receivers.Message, done func()) {
	mt := in.rt.metrics
	mt.received.WithLabelValues(in.receiver).Inc()
	var matched []*route
	for _, r := range in.routes {
		if topics.Match(r.cfg.Topic, m.Topic) {
			matched = append(matched, r)
		}
	}
	acked := func() {
		mt.acked.WithLabelValues(in.receiver).Inc()
		done()
	}
	if len(matched) == 0 {
		mt.unmatched.WithLabelValues(in.receiver).Inc()
		acked()
		return
	}
	s := &settler{done: acked}
	s.left.Store(int32(len(matched)))
	for _, r := range matched {
		env := message.Envelope{
			ID: message.NewID(), Topic: m.Topic, Payload: m.Payload, QoS: m.QoS, ReceivedAt: m.ReceivedAt,
		}
		ok := false
		if m.Truncated {
			// Never routed (DESIGN.md §11.1): an ingest dead letter of its
			// first 1 KiB, or dropped and counted without an outbox store.
			reason := fmt.Sprintf("%s: %d bytes, sha256 %s; the first %d bytes are kept",
				receivers.ReasonPayloadTooLarge, m.Size, m.SHA256, len(m.Payload))
			ok = in.rt.failAtIngest(ctx, r, newMessage(env, nil), reason, s.settle)
		} else {
			ok = in.rt.dispatch(ctx, r, newMessage(env, nil), s.settle)
		}
		if !ok {
			return
		}
	}
}

// message is one route's copy of a message on its way through the route.
type routed struct {
	// env is the route's envelope (own, for one allocation per message);
	// its processors change it.
	env *message.Envelope
	own message.Envelope
	// received is the envelope as it arrived, before processors: what an
	// ingest dead letter keeps, so that a requeue runs it through the route
	// again. (Processors never write into a payload and copy headers before
	// changing them, so sharing them is safe.)
	received message.Envelope
	// replay is the requeued ingest dead letter this message replays,
	// claimed by the replayer; nil for a message from a receiver. A
	// permanent failure dead-letters it again, and then sets dead.
	replay *stores.Record
	dead   bool
}

func newMessage(env message.Envelope, replay *stores.Record) *routed {
	m := &routed{own: env, received: env, replay: replay}
	m.env = &m.own
	return m
}

// dispatch runs m through route r (processors, then its delivery mode) and
// arranges for settle to be called when its delivery has settled. It returns
// false when ctx ended before the delivery was accepted (settle will not be
// called).
func (rt *Runtime) dispatch(ctx context.Context, r *route, m *routed, settle func()) bool {
	mt, env := rt.metrics, m.env
	mt.routeReceived.WithLabelValues(r.id).Inc()
	settleRoute := func() {
		mt.routeAcked.WithLabelValues(r.id).Inc()
		settle()
	}
	var coalesceKey string
	if r.process != nil {
		drop, ck, err := r.process(env)
		if err != nil {
			return rt.failAtIngest(ctx, r, m, fmt.Sprintf("processor: %v", err), settleRoute)
		}
		if drop {
			mt.filtered.WithLabelValues(r.id).Inc()
			settleRoute()
			return true
		}
		coalesceKey = ck
	}
	if env.ID == "" {
		return rt.failAtIngest(ctx, r, m, "processor: empty envelope id", settleRoute)
	}
	if r.mode == routes.DirectHold {
		return r.hold.submit(ctx, m, settleRoute)
	}
	rec := stores.Record{
		Session:     r.session,
		Partition:   stores.PartitionOf(partitionKey(env), r.partitions),
		Route:       r.id,
		Envelope:    *env,
		CoalesceKey: coalesceKey,
	}
	if ttl := r.cfg.Policy.TTL.D(); ttl > 0 {
		rec.ExpiresAt = env.ReceivedAt.Add(ttl)
	}
	return rt.commit.submit(ctx, r, rec, settleRoute)
}

func partitionKey(env *message.Envelope) string {
	if env.Key != "" {
		return env.Key
	}
	return env.ID
}

// failAtIngest settles a message that failed permanently before delivery (a
// processor or ordering-key error) by the route's on_permanent_failure: dead
// letter (retried until durable, or until ctx ends) or drop.
func (rt *Runtime) failAtIngest(ctx context.Context, r *route, m *routed, reason string, settle func()) bool {
	if m.env.ID == "" {
		m.env.ID = message.NewID()
	}
	if !rt.settleFailure(ctx, r, m, reason) {
		return false
	}
	settle()
	return true
}

// settleFailure applies on_permanent_failure to m; it reports false only
// when ctx ended before a dead letter was durable.
func (rt *Runtime) settleFailure(ctx context.Context, r *route, m *routed, reason string) bool {
	log := rt.log.With("route", r.id, "record_id", m.env.ID)
	if !r.dlq {
		rt.metrics.dropped.WithLabelValues(r.id).Inc()
		log.Warn("permanent failure: message dropped", "error", reason)
		return true
	}
	if reason == "" {
		reason = "permanent failure"
	}
	for attempt := 1; ; attempt++ {
		err := rt.deadLetter(ctx, r, m, reason)
		if err == nil {
			rt.metrics.deadLettered.WithLabelValues(r.id).Inc()
			log.Warn("permanent failure: message dead-lettered", "error", reason)
			return true
		}
		if errors.Is(err, stores.ErrInvalid) {
			rt.metrics.dropped.WithLabelValues(r.id).Inc()
			log.Error("permanent failure: dead letter rejected by the store; message dropped", "error", err)
			return true
		}
		if errors.Is(err, stores.ErrStaleToken) {
			// A replay whose claim lapsed: another replayer owns the record
			// now and settles it.
			m.dead = true
			log.Warn("permanent failure of a replay whose claim lapsed; left to its new claimer", "error", reason)
			return true
		}
		log.Warn("dead letter failed; retrying", "error", err, "attempt", attempt)
		if !sleepCtx(ctx, backoffDelay(attempt, r.cfg.Policy.Backoff, 0)) {
			return false
		}
	}
}
