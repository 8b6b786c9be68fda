package drainer

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/gobridge/gobridge/message"
	"github.com/gobridge/gobridge/routes"
	"github.com/gobridge/gobridge/senders"
	"github.com/gobridge/gobridge/stores"
)

// settlement is what becomes of one claimed record at the end of a batch.
type settlement int

const (
	unsent   settlement = iota // not sent: released due at once
	complete                   // delivered, or dropped by policy
	release                    // released due at item.nextAt
	dead                       // dead-lettered with item.reason
)

// item is one claimed record in a batch.
type item struct {
	rec   stores.Record
	route *Route
	// next is the following record of the same ordering key in this batch;
	// it becomes ready only when this one is settled.
	next *item

	settle  settlement
	result  string
	reason  string // dead-letter reason or release error
	nextAt  time.Time
	latency time.Duration
	sent    bool
}

// sendResult is the outcome of one Sender.Send call.
type sendResult struct {
	route   *Route
	items   []*item
	errs    []error
	latency time.Duration
}

var errSendTimedOut = errors.New("send timed out: the sender ignored its context")

// claimDeadline is the earliest claim deadline of a batch; zero when none
// is set.
func claimDeadline(recs []stores.Record) time.Time {
	var until time.Time
	for _, r := range recs {
		if !r.ClaimUntil.IsZero() && (until.IsZero() || r.ClaimUntil.Before(until)) {
			until = r.ClaimUntil
		}
	}
	return until
}

// process delivers one claimed batch and records every outcome in the store;
// rnd (its own: batches run concurrently) jitters retry times.
func (p *partition) process(recs []stores.Record, rnd *rand.Rand) {
	g := p.g
	now := g.now()
	slices.SortStableFunc(recs, func(a, b stores.Record) int { return cmp.Compare(a.Seq, b.Seq) })

	items := make([]*item, 0, len(recs))
	ready := map[string][]*item{}
	var order []string // routes in first-seen order, for fair launching
	seen := map[string]bool{}
	lastOfKey := map[string]*item{}
	for _, rec := range recs {
		it := &item{rec: rec}
		items = append(items, it)
		r, ok := g.cfg.Routes[rec.Route]
		if !ok {
			it.settle, it.result = dead, ResultDeadLettered
			it.reason = fmt.Sprintf("unknown route %q", rec.Route)
			continue
		}
		it.route = &r
		if !rec.ExpiresAt.IsZero() && !now.Before(rec.ExpiresAt) {
			it.result = ResultExpired
			it.reason = "expired"
			if r.Policy.OnExpired == routes.PolicyDrop {
				it.settle = complete
			} else {
				it.settle = dead
			}
			continue
		}
		if !seen[r.ID] { // also for records that wait behind their key
			seen[r.ID] = true
			order = append(order, r.ID)
		}
		if k := rec.Envelope.Key; k != "" {
			if prev := lastOfKey[k]; prev != nil {
				prev.next = it
				lastOfKey[k] = it
				continue
			}
			lastOfKey[k] = it
		}
		ready[r.ID] = append(ready[r.ID], it)
	}

	results := make(chan sendResult, len(items))
	inflight := 0
	stopCh := p.stopCtx.Done()
	claimUntil := claimDeadline(recs)
	for !p.lost() {
		// A claim that lapsed (a paused process, a very long batch) may
		// already belong to another owner: launch nothing more from it.
		// What is left unsent is released, or rejected as stale.
		if stopCh != nil && !claimUntil.IsZero() && !g.now().Before(claimUntil) {
			stopCh = nil
		}
		wake := g.note.wait()
		waiting := false
		if stopCh != nil {
			for _, id := range order {
				q := ready[id]
				if len(q) == 0 {
					continue
				}
				r := q[0].route
				lim := g.limiters[id]
				size := max(r.Sender.BatchSize(), 1)
				for len(q) > 0 && lim.tryAcquire() {
					n := min(size, len(q))
					chunk := slices.Clone(q[:n])
					q = q[n:]
					p.send(r, lim, chunk, results)
					inflight++
				}
				ready[id] = q
				waiting = waiting || len(q) > 0
			}
		}
		if inflight == 0 && (!waiting || stopCh == nil) {
			break
		}
		if !waiting {
			wake = nil
		}
		select {
		case res := <-results:
			inflight--
			p.handle(res, ready, rnd)
			// Take every result already waiting before launching again.
			for more := true; more && inflight > 0; {
				select {
				case res := <-results:
					inflight--
					p.handle(res, ready, rnd)
				default:
					more = false
				}
			}
		case <-wake:
		case <-stopCh:
			stopCh = nil // stop launching; collect what is in flight
		case <-p.lostCtx.Done():
		}
	}
	if p.lost() {
		for _, it := range items {
			if it.route != nil {
				g.obs.Delivered(p.outcome(it, ResultStale, "lease lost", g.now()))
			}
		}
		return
	}
	p.settle(items)
}

// send runs one Sender.Send under send_timeout. Its result reaches results
// when Send returns or, for a sender that ignores its context, after
// send_timeout + AbandonGrace as a transient failure; the concurrency slot
// stays taken until Send really returns, so hung sends cannot pile up beyond
// max_in_flight.
func (p *partition) send(r *Route, lim *limiter, chunk []*item, results chan<- sendResult) {
	g := p.g
	envs := make([]*message.Envelope, len(chunk))
	for i, it := range chunk {
		envs[i] = &it.rec.Envelope
		it.sent = true
	}
	timeout := r.Policy.SendTimeout.D()
	ctx, cancel := context.WithTimeout(p.workCtx, timeout)
	start := g.now()
	var once sync.Once
	report := func(errs []error) {
		once.Do(func() {
			results <- sendResult{route: r, items: chunk, errs: errs, latency: g.now().Sub(start)}
		})
	}
	// When the send's context ends and Send has not returned within
	// AbandonGrace, report the send as timed out; Send keeps its goroutine
	// (and its concurrency slot) until it really returns.
	stopWatch := context.AfterFunc(ctx, func() {
		t := time.AfterFunc(g.cfg.AbandonGrace, func() {
			once.Do(func() {
				if ao, ok := g.obs.(AbandonObserver); ok {
					ao.Abandoned(r.ID)
				}
				g.log.Warn("abandoned a send that ignored its context", "route", r.ID, "timeout", timeout)
				results <- sendResult{route: r, items: chunk, errs: fill(len(envs), errSendTimedOut), latency: g.now().Sub(start)}
			})
		})
		_ = t
	})
	g.senders.Add(1)
	go func() {
		defer g.senders.Done()
		defer lim.release()
		errs := r.Sender.Send(ctx, envs)
		stopWatch()
		cancel()
		if len(errs) != len(envs) {
			errs = fill(len(envs), fmt.Errorf("sender returned %d results for %d envelopes", len(errs), len(envs)))
		}
		report(errs)
	}()
}

func fill(n int, err error) []error {
	errs := make([]error, n)
	for i := range errs {
		errs[i] = err
	}
	return errs
}

// handle classifies one send's results — the one place where delivery
// outcomes are told apart — and decides each record's settlement.
func (p *partition) handle(res sendResult, ready map[string][]*item, rnd *rand.Rand) {
	g := p.g
	now := g.now()
	pol := res.route.Policy
	// Sends cut short by the shutdown deadline were not the target's fault:
	// their records go back due at once, without backoff or poisoning.
	cutShort := p.workCtx.Err() != nil
	anyOK, anyCap := false, false
	for i, it := range res.items {
		err := res.errs[i]
		it.latency = res.latency
		class, retryAfter := senders.Classify(err)
		if err != nil && cutShort {
			it.settle, it.result, it.reason, it.nextAt = release, ResultRetried, err.Error(), now
			p.holdChain(it)
			continue
		}
		switch class {
		case senders.OK:
			anyOK = true
			it.settle, it.result = complete, ResultOK
			p.readyNext(it, ready)
		case senders.Saturated:
			anyCap = true
			it.settle, it.result, it.reason = release, ResultCapacity, err.Error()
			it.nextAt = NextRetry(now, it.rec.Attempts, pol.Backoff, retryAfter, rnd)
			p.holdChain(it)
		case senders.Fatal:
			it.reason = err.Error()
			if pol.OnPermanentFailure == routes.PolicyDrop {
				it.settle, it.result = complete, ResultDropped
			} else {
				it.settle, it.result = dead, ResultDeadLettered
			}
			p.readyNext(it, ready)
		default: // senders.Transient
			if Poisoned(it.rec, pol, now) {
				since := it.rec.FirstAttemptAt
				if since.IsZero() {
					since = it.rec.CreatedAt
				}
				it.settle, it.result = dead, ResultDeadLettered
				it.reason = fmt.Sprintf("poisoned after %d attempts over %s: %v",
					it.rec.Attempts, now.Sub(since).Round(time.Millisecond), err)
				p.readyNext(it, ready)
				continue
			}
			it.settle, it.result, it.reason = release, ResultRetried, err.Error()
			it.nextAt = NextRetry(now, it.rec.Attempts, pol.Backoff, 0, rnd)
			p.holdChain(it)
		}
	}
	g.limiters[res.route.ID].record(anyOK, anyCap)
	if anyOK {
		g.obs.Sent(g.cfg.Session, now)
	}
}

// readyNext makes the next record of it's key sendable: it is settled.
func (p *partition) readyNext(it *item, ready map[string][]*item) {
	if n := it.next; n != nil {
		ready[n.route.ID] = append(ready[n.route.ID], n)
	}
}

// holdChain releases the later records of it's key unsent, due when it is,
// so that a retrying record holds back only its own key.
func (p *partition) holdChain(it *item) {
	for n := it.next; n != nil; n = n.next {
		n.settle, n.nextAt, n.reason = release, it.nextAt, n.rec.LastError
	}
}

func (p *partition) outcome(it *item, result, errText string, at time.Time) Outcome {
	route := it.rec.Route
	return Outcome{
		Session: p.g.cfg.Session, Route: route, ID: it.rec.Envelope.ID, Partition: p.n,
		Result: result, Attempt: it.rec.Attempts, Err: errText, Latency: it.latency, At: at,
	}
}
