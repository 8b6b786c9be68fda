package bridge

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/gobridge/gobridge/stores"
)

// Replaying requeued ingest dead letters.
//
// A dead letter made at ingest (a processor error, a direct_hold permanent
// failure) keeps the message as it arrived, in the route's ingest-dead
// session. Requeueing it (dlq requeue, the console) makes it pending there;
// the replayer claims such records and runs each through its route again,
// exactly as if it had just arrived: processors, then the route's delivery
// mode. The record is completed once the route settled the message
// (delivered, committed to the outbox, filtered or dropped); a new permanent
// failure dead-letters the same record again, with the new reason.
//
// Claims are not leased: several instances may replay at once, each record
// going to one of them. A claim lasts replayClaimTTL; a replay still
// unsettled by then (a direct_hold target down that long) may be claimed and
// sent again, which at-least-once delivery allows.

// replayInterval is how often the replayer looks for requeued records.
var replayInterval = 2 * time.Second

const (
	replayBatch    = 100
	replayClaimTTL = 10 * time.Minute
)

// replayRequeued runs until ctx is done, replaying the requeued ingest dead
// letters of every route, each route on its own (a replay held by a target
// that is down holds only its route). It stops with ingest: the messages it
// dispatched settle (or not) like any other message at shutdown.
func (rt *Runtime) replayRequeued(ctx context.Context) {
	if rt.outbox == nil {
		return
	}
	var wg sync.WaitGroup
	for _, r := range rt.routes {
		wg.Go(func() { rt.replayRoute(ctx, r) })
	}
	wg.Wait()
}

func (rt *Runtime) replayRoute(ctx context.Context, r *route) {
	t := time.NewTicker(replayInterval)
	defer t.Stop()
	for {
		// A full batch may mean more are waiting: go on at once.
		for ctx.Err() == nil && rt.replayBatch(ctx, r) == replayBatch {
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// replayBatch claims up to replayBatch requeued records of r, runs them
// through r and settles them; it returns how many it claimed.
func (rt *Runtime) replayBatch(ctx context.Context, r *route) int {
	log := rt.log.With("route", r.id, "session", deadSessionPrefix+r.id)
	now := time.Now()
	recs, err := rt.outbox.Claim(ctx, stores.ClaimRequest{
		Session: deadSessionPrefix + r.id, Token: now.UnixNano(), Limit: replayBatch,
		Now: now, Until: now.Add(replayClaimTTL),
	})
	if err != nil {
		if ctx.Err() == nil {
			log.Warn("replay: claim requeued dead letters", "error", err)
		}
		return 0
	}
	if len(recs) == 0 {
		return 0
	}
	log.Info("replaying requeued dead letters", "count", len(recs))
	msgs := make([]*routed, len(recs))
	settled := make(chan int, len(recs))
	dispatched := 0
	for i := range recs {
		msgs[i] = newMessage(recs[i].Envelope, &recs[i])
		if !rt.dispatch(ctx, r, msgs[i], func() { settled <- i }) {
			break
		}
		dispatched++
	}
	done := make([]bool, len(recs))
	for range dispatched {
		select {
		case i := <-settled:
			done[i] = true
			if msgs[i].dead {
				continue // dead-lettered again, under this claim
			}
			sctx, cancel := detached(ctx)
			if err := rt.outbox.Complete(sctx, recs[i]); err != nil && !errors.Is(err, stores.ErrStaleToken) {
				log.Warn("replay: complete", "record_id", recs[i].Envelope.ID, "error", err)
			}
			cancel()
			continue
		case <-ctx.Done():
		}
		break
	}
	// Shutdown: what did not settle goes back to pending at once (a late
	// delivery of it is a duplicate, which at-least-once allows).
	for i := range recs {
		if done[i] {
			continue
		}
		sctx, cancel := detached(ctx)
		if err := rt.outbox.Release(sctx, recs[i], time.Now(), ""); err != nil && !errors.Is(err, stores.ErrStaleToken) {
			log.Warn("replay: release at shutdown", "record_id", recs[i].Envelope.ID, "error", err)
		}
		cancel()
	}
	return len(recs)
}

// detached is ctx without its cancellation, bounded to 5 s: settling a
// replay must not be cut short by the shutdown that ended it.
func detached(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
}
