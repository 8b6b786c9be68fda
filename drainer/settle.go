package drainer

import (
	"context"
	"errors"
	"time"

	"github.com/gobridge/gobridge/stores"
)

// settle records the outcome of a batch in the store: one Complete call for
// every delivered or dropped record (per-record completes would cap
// throughput at the store's commit rate), then dead letters and releases.
// The writes run detached from shutdown with a short timeout (R16), and stop
// at once when the lease is lost: the store would reject them anyway.
func (p *partition) settle(items []*item) {
	g := p.g
	ctx, cancel := context.WithTimeout(context.WithoutCancel(p.lostCtx), settleTimeout)
	defer cancel()
	now := g.now()

	var done []*item
	for _, it := range items {
		if it.settle == complete {
			done = append(done, it)
		}
	}
	if len(done) > 0 && !p.lost() {
		recs := make([]stores.Record, len(done))
		for i, it := range done {
			recs[i] = it.rec
		}
		err := g.store.Complete(ctx, recs...)
		if errors.Is(err, stores.ErrStaleToken) && len(done) > 1 {
			// One stale record fails the whole call: settle the others.
			for _, it := range done {
				p.report(it, g.store.Complete(ctx, it.rec), now)
			}
		} else {
			for _, it := range done {
				p.report(it, err, now)
			}
		}
	}
	for _, it := range items {
		if p.lost() {
			g.obs.Delivered(p.outcome(it, ResultStale, "lease lost", now))
			continue
		}
		switch it.settle {
		case dead:
			p.report(it, g.store.DeadLetter(ctx, it.rec, it.reason), now)
		case release:
			p.report(it, g.store.Release(ctx, it.rec, it.nextAt, it.reason), now)
		case unsent:
			p.report(it, g.store.Release(ctx, it.rec, now, it.rec.LastError), now)
		}
	}
}

// report tells the observer how a record was settled; records released
// without being sent (held back behind their key, or unsent at shutdown)
// are not reported.
func (p *partition) report(it *item, err error, now time.Time) {
	g := p.g
	if err != nil {
		g.log.Warn("record outcome", "route", it.rec.Route, "record_id", it.rec.Envelope.ID,
			"attempt", it.rec.Attempts, "error", err)
		g.obs.Delivered(p.outcome(it, ResultStale, err.Error(), now))
		return
	}
	if it.settle == unsent || (it.settle == release && !it.sent) {
		return
	}
	if it.settle == dead {
		g.log.Warn("record dead-lettered", "route", it.rec.Route, "record_id", it.rec.Envelope.ID,
			"attempt", it.rec.Attempts, "error", it.reason)
	}
	g.obs.Delivered(p.outcome(it, it.result, it.reason, now))
}
