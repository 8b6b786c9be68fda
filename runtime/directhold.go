package runtime

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"github.com/gobridge/gobridge/delivery"
	"github.com/gobridge/gobridge/drainer"
	"github.com/gobridge/gobridge/routes"
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

// submit waits for a send slot (or ctx) and starts the delivery of env;
// settle is called when it has settled. It returns false when ctx ended
// first.
func (h *holder) submit(ctx context.Context, env *delivery.Envelope, settle func()) bool {
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
		if h.deliver(env) {
			settle()
		}
	}()
	return true
}

// deliver sends env until the target accepts it or it fails permanently;
// it returns false when shutdown interrupted it (env stays unacknowledged).
func (h *holder) deliver(env *delivery.Envelope) bool {
	rt, mt, id := h.rt, h.rt.metrics, h.r.id
	log := rt.log.With("route", id, "record_id", env.ID)
	envs := []*delivery.Envelope{env}
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
		class, retryAfter := delivery.Classify(err)
		switch class {
		case delivery.OK:
			mt.sent.WithLabelValues(id).Inc()
			return true
		case delivery.Fatal:
			return rt.settleFailure(rt.holdCtx, h.r, env, err.Error())
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

// deadSessionPrefix names the sessions that hold dead letters made at
// ingest (processor errors, direct_hold permanent failures). No drainer
// serves them: a record only passes through on its way to the dead letters.
const deadSessionPrefix = "gobridge.ingest-dead."

// deadLetterDirect makes env a dead letter of route r with reason, without a
// drainer: it appends the record to the route's ingest-dead session (with
// the reason as its last error, so a crash between the steps loses nothing:
// the next call sweeps it up), claims that session and dead-letters what it
// claimed. A record there without a last error was requeued by an operator;
// it is released untouched (no drainer serves these sessions: see the
// README section "operations").
func (rt *Runtime) deadLetterDirect(ctx context.Context, r *route, env *delivery.Envelope, reason string) error {
	rt.deadMu.Lock()
	defer rt.deadMu.Unlock()
	if reason == "" {
		reason = "permanent failure"
	}
	now := time.Now()
	session := deadSessionPrefix + r.id
	rec := stores.Record{Session: session, Route: r.id, Envelope: *env, LastError: reason}
	if err := rt.outbox.Append(ctx, rec); err != nil {
		return fmt.Errorf("append dead letter: %w", err)
	}
	claimed, err := rt.outbox.Claim(ctx, stores.ClaimRequest{
		Session: session, Token: now.UnixNano(), Limit: 100, Now: now, Until: now.Add(time.Minute),
	})
	if err != nil {
		return fmt.Errorf("claim dead letter: %w", err)
	}
	for _, c := range claimed {
		if c.LastError == "" {
			// Not ours: a dead letter an operator requeued (Requeued clears
			// the error). Leave it pending rather than dead-letter it again.
			if err := rt.outbox.Release(ctx, c, now, ""); err != nil {
				return fmt.Errorf("release requeued record: %w", err)
			}
			continue
		}
		why := c.LastError
		if c.Envelope.ID == env.ID {
			why = reason
		}
		c.DeadAt = now
		if err := rt.outbox.DeadLetter(ctx, c, why); err != nil {
			return fmt.Errorf("dead-letter: %w", err)
		}
	}
	return nil
}
