package drainer

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/gobridge/gobridge/message"
	"github.com/gobridge/gobridge/senders"
	"github.com/gobridge/gobridge/stores"
)

var errSendTimedOut = errors.New("send timed out: the sender ignored its context")

// sendResult is the outcome of one Sender.Send call.
type sendResult struct {
	route   *Route
	items   []*item
	errs    []error
	start   time.Time
	latency time.Duration
}

// launch starts sends of ready records, route by route, while the route's
// concurrency limit and its sender's health allow. It returns how long
// until a down sender may be probed again (0: none waits) and whether a
// route waits for a concurrency slot.
func (p *partition) launch(now time.Time) (probeWait time.Duration, limited bool) {
	for _, id := range p.g.order {
		r := p.g.routes[id]
		for p.next(id, now) {
			p.collect() // results already back keep the sender's health current
			if !p.next(id, now) {
				break
			}
			if !r.lim.tryAcquire() {
				limited = true
				break
			}
			n := max(r.Sender.BatchSize(), 1)
			if !r.Health.Up() {
				n = 1 // a probe
			}
			if ok, wait := r.Health.Probe(now); !ok {
				r.lim.release()
				if wait > 0 && (probeWait == 0 || wait < probeWait) {
					probeWait = wait
				}
				break
			}
			chunk := make([]*item, 1, n)
			chunk[0] = p.sched.take(id)
			for len(chunk) < n && p.next(id, now) {
				chunk = append(chunk, p.sched.take(id))
			}
			p.send(r, chunk)
		}
	}
	return probeWait, limited
}

// next prepares the head of route id's ready queue, settling the records
// ahead of it that cannot be sent, and reports whether one is left to send.
func (p *partition) next(id string, now time.Time) bool {
	for len(p.sched.ready[id]) > 0 {
		if p.prepare(p.sched.ready[id][0], now) {
			return true
		}
	}
	return false
}

// prepare readies the head record of a ready queue for sending: it settles
// an expired record by on_expired and runs the processors of a raw one
// (settling it when they filter or fail). It reports whether the record is
// still there to send.
func (p *partition) prepare(it *item, now time.Time) bool {
	r := it.route
	if e := p.g.clock.Rebase(it.expires, it.scheduled); !e.IsZero() && !now.Before(e) {
		if r.Policy.DropExpired {
			p.settle(it, stores.Done, "expired", ResultExpired, now)
		} else {
			p.settleDead(it, "expired", ResultExpired, now)
		}
		return false
	}
	if !it.rec.Raw || it.prepared || r.Prepare == nil {
		return true
	}
	env := it.rec.Envelope.Clone()
	drop, err := r.Prepare(env)
	switch {
	case err != nil:
		p.settleDead(it, "processor: "+err.Error(), ResultDeadLettered, now)
		return false
	case drop:
		p.settle(it, stores.Done, "filtered", ResultFiltered, now)
		return false
	}
	env.Key = it.key() // its place in the schedule, taken unprepared
	it.env, it.prepared = env, true
	return true
}

// send runs one Sender.Send under send_timeout. Its result reaches
// p.results when Send returns or, for a sender that ignores its context,
// after send_timeout + AbandonGrace as a transient failure; the concurrency
// slot stays taken until Send really returns, so that hung sends cannot
// pile up beyond max_in_flight.
func (p *partition) send(r *Route, chunk []*item) {
	g := p.g
	envs := make([]*message.Envelope, len(chunk))
	for i, it := range chunk {
		envs[i] = it.env
	}
	timeout := r.Policy.SendTimeout
	ctx, cancel := context.WithTimeout(p.workCtx, timeout)
	start := g.now()
	var once sync.Once
	report := func(errs []error, abandoned bool) {
		once.Do(func() {
			if abandoned {
				g.obs.Abandoned(r.ID)
				g.log.Warn("abandoned a send that ignored its context", "route", r.ID, "timeout", timeout)
				errs = fill(len(envs), errSendTimedOut)
			}
			p.results <- sendResult{route: r, items: chunk, errs: errs, start: start, latency: g.now().Sub(start)}
		})
	}
	stopWatch := context.AfterFunc(ctx, func() {
		time.AfterFunc(g.opts.AbandonGrace, func() { report(nil, true) })
	})
	p.inflight++
	g.sends.Add(1)
	go func() {
		defer g.sends.Done()
		defer r.lim.release()
		errs := r.Sender.Send(ctx, envs)
		stopWatch()
		cancel()
		if len(errs) != len(envs) {
			errs = fill(len(envs), fmt.Errorf("sender returned %d results for %d envelopes", len(errs), len(envs)))
		}
		report(errs, false)
	}()
}

// collect handles the send results that are already back, without waiting.
func (p *partition) collect() {
	for p.inflight > 0 {
		select {
		case res := <-p.results:
			p.handle(res)
		default:
			return
		}
	}
}

func fill(n int, err error) []error {
	errs := make([]error, n)
	for i := range errs {
		errs[i] = err
	}
	return errs
}

// handle classifies one send's results — the one place where delivery
// outcomes are told apart — and settles each record.
func (p *partition) handle(res sendResult) {
	p.inflight--
	now := p.g.now()
	r, pol := res.route, res.route.Policy
	cutShort := p.workCtx.Err() != nil // shutdown deadline or lease loss: not the target's fault
	anyOK, anyCap := false, false
	for i, it := range res.items {
		err := res.errs[i]
		if cutShort && (err != nil || p.lost()) {
			if err == nil { // delivered, but the outcome cannot be recorded: the next owner sends it again
				p.g.obs.Delivered(p.outcome(it, ResultStale, "lease lost before the outcome was recorded", now))
			}
			p.sched.retry(it, now, now) // left claimed: the next owner sends it
			continue
		}
		r.Health.Record(it.rec.Envelope.ID, err, now, pol.Backoff.Ceiling)
		class, retryAfter := senders.Classify(err)
		it.latency = res.latency
		switch class {
		case senders.OK:
			anyOK = true
			it.rec.Attempts++
			p.settle(it, stores.Done, "", ResultOK, now)
			p.g.obs.Sent(p.g.opts.Session, now)
		case senders.Saturated: // no attempt counted
			anyCap = anyCap || !errors.Is(err, senders.ErrHeld) // held: not the target's signal
			it.rec.NextAttemptAt = pol.Backoff.Next(now, it.rec.Attempts+1, retryAfter, p.rnd)
			p.sched.retry(it, it.rec.NextAttemptAt, now)
			p.g.obs.Delivered(p.outcome(it, ResultCapacity, err.Error(), now))
		case senders.Fatal:
			it.rec.Attempts++
			if it.rec.FirstAttemptAt.IsZero() { // a letter that dies at its first send still shows when
				it.rec.FirstAttemptAt = res.start
			}
			if pol.DropPermanent {
				p.settle(it, stores.Done, err.Error(), ResultDropped, now)
			} else {
				p.settleDead(it, err.Error(), ResultDeadLettered, now)
			}
		default:
			it.rec.Attempts++
			if it.rec.FirstAttemptAt.IsZero() {
				it.rec.FirstAttemptAt = res.start
			}
			if since := p.firstAttempt(it, now); Poisoned(it.rec.Attempts, since, pol, now, r.Health.DeliveredSince) {
				p.settleDead(it, fmt.Sprintf("poisoned after %d attempts over %s: %v",
					it.rec.Attempts, now.Sub(since).Round(time.Millisecond), err), ResultDeadLettered, now)
				break
			}
			it.rec.NextAttemptAt = pol.Backoff.Next(now, it.rec.Attempts, 0, p.rnd)
			it.rec.LastError = err.Error()
			p.settle(it, stores.Retry, it.rec.LastError, ResultTransient, now)
		}
		// A newer record of its coalesce key waited for this send: it goes
		// now, and replaces this one if it is still held (its send failed).
		if p.sched.returned(it, now) != nil && (it.where == timed || it.where == ready) {
			p.settle(it, stores.Done, "coalesced", ResultCoalesced, now)
		}
	}
	r.lim.record(anyOK, anyCap)
}

// firstAttempt is when it was first sent, on the wall clock as it is now
// (see stores.Clock), and never after now.
func (p *partition) firstAttempt(it *item, now time.Time) time.Time {
	since := p.g.clock.Rebase(it.rec.FirstAttemptAt, it.rec.FirstAttemptAt)
	if now := now.Round(0); since.After(now) {
		return now
	}
	return since
}

// settleDead dead-letters it, unless its route holds max_dead_letters:
// then it is retried at Backoff.Max without counting an attempt.
func (p *partition) settleDead(it *item, reason, result string, now time.Time) {
	if r := it.route; r != nil && r.DeadFull != nil && r.DeadFull() {
		it.rec.NextAttemptAt = now.Add(r.Policy.Backoff.Max)
		it.rec.LastError = reason
		p.settle(it, stores.Retry, "dead letters full: "+reason, ResultHeld, now)
		return
	}
	p.settle(it, stores.DeadLetter, reason, result, now)
}

// settle queues it's outcome for the next write and updates the schedule:
// a Retry stays held (due at NextAttemptAt), the others leave.
func (p *partition) settle(it *item, o stores.Outcome, reason, result string, now time.Time) {
	p.settleNow(it, o, reason, result, now)
	if o == stores.Retry {
		p.sched.retry(it, it.rec.NextAttemptAt, now)
		return
	}
	p.sched.done(it, now)
}

// settleNow queues its outcome without touching the schedule (for records
// that never entered it).
func (p *partition) settleNow(it *item, o stores.Outcome, reason, result string, now time.Time) {
	p.g.settler.Settle(stores.Settlement{
		Key: it.rec.Key(), Token: it.rec.Token, Outcome: o, Attempts: it.rec.Attempts,
		FirstAttemptAt: it.rec.FirstAttemptAt, NextAttemptAt: it.rec.NextAttemptAt, Reason: reason, At: now,
	})
	if o != stores.Retry {
		p.mu.Lock()
		p.held--
		p.mu.Unlock()
		if o == stores.DeadLetter {
			p.g.log.Warn("record dead-lettered", "route", it.rec.Route, "record_id", it.rec.Envelope.ID,
				"attempt", it.rec.Attempts, "error", reason)
		}
	}
	p.g.obs.Delivered(p.outcome(it, result, reason, now))
}

// outcome reports its result; reason is the error or the settlement's reason.
func (p *partition) outcome(it *item, result, reason string, at time.Time) Outcome {
	return Outcome{
		Session: p.g.opts.Session, Route: it.rec.Route, ID: it.rec.Envelope.ID, Partition: p.n,
		Result: result, Attempt: it.rec.Attempts, Err: reason, Latency: it.latency, At: at,
	}
}
