package bridge

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"github.com/gobridge/gobridge/drainer"
	"github.com/gobridge/gobridge/message"
	"github.com/gobridge/gobridge/routes"
	"github.com/gobridge/gobridge/senders"
	"github.com/gobridge/gobridge/stores"
)

// holder delivers a direct_hold route's messages: it sends each one
// synchronously, at most max_in_flight at once, and settles the message only
// once the target accepted it (or on_permanent_failure settled it).
//
// Transient and capacity errors are retried with the route's backoff (full
// jitter, a retry-after hint honoured) for as long as the process runs: the
// source message stays unacknowledged meanwhile, so the broker keeps it and
// its flow control pushes back on publishers. There is no poisoning here
// (DESIGN.md §1.4: only the drainer poisons records): a target that is down
// holds the route until it returns. At shutdown the retries stop and the
// message is left unacknowledged, so the broker redelivers it.
type holder struct {
	rt      *Runtime
	r       *route
	sem     chan struct{}
	timeout time.Duration
}

func newHolder(rt *Runtime, r *route) *holder {
	return &holder{
		rt: rt, r: r,
		sem:     make(chan struct{}, cmp.Or(r.cfg.Policy.MaxInFlight, 100)),
		timeout: cmp.Or(r.cfg.Policy.SendTimeout.D(), 30*time.Second),
	}
}

// submit waits for a send slot (or ctx) and starts the delivery of m;
// settle is called when it has settled. It returns false when ctx ended
// first.
func (h *holder) submit(ctx context.Context, m *routed, settle func()) bool {
	select {
	case h.sem <- struct{}{}:
	case <-ctx.Done():
		return false
	}
	h.rt.holds.Add(1)
	n := len(h.sem)
	h.rt.metrics.inFlight.WithLabelValues(h.r.id).Set(float64(n))
	go func() {
		defer h.rt.holds.Done()
		defer func() {
			<-h.sem
			h.rt.metrics.inFlight.WithLabelValues(h.r.id).Set(float64(len(h.sem)))
		}()
		if h.deliver(m) {
			settle()
		}
	}()
	return true
}

// deliver sends m until the target accepts it or it fails permanently;
// it returns false when shutdown interrupted it (m stays unacknowledged).
func (h *holder) deliver(m *routed) bool {
	rt, mt, id, env := h.rt, h.rt.metrics, h.r.id, m.env
	log := rt.log.With("route", id, "record_id", env.ID)
	envs := []*message.Envelope{env}
	for attempt := 1; ; attempt++ {
		ctx, cancel := context.WithTimeout(rt.holdCtx, h.timeout)
		start := time.Now()
		errs := h.r.sender.Send(ctx, envs)
		cancel()
		mt.sendSeconds.WithLabelValues(id).Observe(time.Since(start).Seconds())
		var err error
		if len(errs) > 0 {
			err = errs[0]
		}
		class, retryAfter := senders.Classify(err)
		switch class {
		case senders.OK:
			mt.sent.WithLabelValues(id).Inc()
			return true
		case senders.Fatal:
			return rt.settleFailure(rt.holdCtx, h.r, m, err.Error())
		}
		mt.retried.WithLabelValues(id, class.String()).Inc()
		if rt.stoppingNow() {
			log.Info("shutdown: message left unacknowledged for redelivery", "attempt", attempt, "error", err)
			return false
		}
		wait := backoffDelay(attempt, h.r.cfg.Policy.Backoff, retryAfter)
		log.Debug("send failed; retrying while holding the source", "attempt", attempt, "error", err, "retry_in", wait)
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-rt.stopping:
			t.Stop()
			log.Info("shutdown: message left unacknowledged for redelivery", "attempt", attempt)
			return false
		}
	}
}

// backoffDelay is the full-jitter delay after attempt failed, never shorter
// than retryAfter.
func backoffDelay(attempt int, b routes.Backoff, retryAfter time.Duration) time.Duration {
	now := time.Now()
	return drainer.NextRetry(now, attempt, b, retryAfter, nil).Sub(now)
}

// sleepCtx waits d or until ctx is done; it reports whether d passed.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// deadSessionPrefix names the sessions that hold the dead letters made at
// ingest (processor errors, direct_hold permanent failures), one per route.
// No drainer serves them; the replayer runs their requeued records through
// their route again.
const deadSessionPrefix = "gobridge.ingest-dead."

// deadLetter makes m a dead letter of route r with reason, without a
// drainer. A replayed message dead-letters the record it replays (under the
// replayer's claim); any other is appended to the route's ingest-dead
// session as it arrived (with the route's envelope ID), in one write.
func (rt *Runtime) deadLetter(ctx context.Context, r *route, m *routed, reason string) error {
	if m.replay != nil {
		if err := rt.outbox.DeadLetter(ctx, *m.replay, reason); err != nil {
			return fmt.Errorf("dead-letter replay: %w", err)
		}
		m.dead = true
		return nil
	}
	env := m.received
	env.ID = m.env.ID
	rec := stores.Record{
		Session: deadSessionPrefix + r.id, Route: r.id, Envelope: env,
		LastError: reason, DeadReason: reason, DeadAt: time.Now(),
	}
	if err := rt.outbox.AppendDead(ctx, rec); err != nil {
		return fmt.Errorf("append dead letter: %w", err)
	}
	return nil
}
