package bridge

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gobridge/gobridge/drainer"
	"github.com/gobridge/gobridge/stores"
)

const (
	writeMaxAppends = 512 // the most records appended by one Write
	// writeLinger is how long a write waits for more records when the
	// previous one carried several (under load); a lone record never waits.
	writeLinger = 500 * time.Microsecond
	// settleLinger is how long settlements wait to share the next append's
	// commit: nothing waits on them, and a commit costs the same for one
	// row as for hundreds.
	settleLinger = 20 * time.Millisecond
)

// appendReq is one record waiting for the group commit. done is called
// once, from the writer goroutine: with a nil error when the record is
// durable, stored then being the record as inserted (its truncated dead
// letter when the store refused it whole; nil when it was already there),
// else with why it gave up.
type appendReq struct {
	rec  stores.Record
	done func(stored *stores.Record, err error)
}

// writer is the single writer of the outbox store, one durable commit per
// batch of the records ingest appends (claimed for their drainer when it
// has room: Group.Reserve) and the drainers' settlements since the last.
// After the commit it hands the claimed records to their drainers and calls
// the appends' done callbacks in order.
type writer struct {
	store   stores.Store
	groups  atomic.Pointer[map[string]*drainer.Group] // by session; a reload replaces it
	metrics *metrics
	log     *slog.Logger
	limits  *admission
	drained func([]stores.Settlement) // told each batch's settlements once written

	mu       sync.Mutex
	appends  []appendReq
	settles  []stores.Settlement
	flushed  uint64 // batches written
	queued   uint64 // the batch the next write will be
	waiters  map[uint64][]chan struct{}
	kick     chan struct{}
	quit     chan struct{} // closed by stop: write what is queued, then return
	stopOnce sync.Once
	failing  time.Time // when writes began failing; zero when the last one succeeded

	abortCtx context.Context // cancelled by abort: give up retrying writes
	abort    context.CancelFunc
}

func newWriter(store stores.Store, m *metrics, log *slog.Logger, limits *admission) *writer {
	w := &writer{
		store: store, metrics: m, limits: limits,
		log: log.With("component", "writer"), waiters: map[uint64][]chan struct{}{},
		kick: make(chan struct{}, 1), quit: make(chan struct{}), queued: 1,
	}
	w.abortCtx, w.abort = context.WithCancel(context.Background())
	return w
}

// setGroups hands records to sessions' drainer groups from the next batch on.
func (w *writer) setGroups(sessions map[string]*session) {
	groups := make(map[string]*drainer.Group, len(sessions))
	for id, s := range sessions {
		groups[id] = s.group
	}
	w.groups.Store(&groups)
}

// add queues one record for the next write.
func (w *writer) add(rec stores.Record, done func(stored *stores.Record, err error)) {
	w.mu.Lock()
	w.appends = append(w.appends, appendReq{rec: rec, done: done})
	w.mu.Unlock()
	w.signal()
}

// Settle implements drainer.Settler.
func (w *writer) Settle(s stores.Settlement) {
	w.mu.Lock()
	w.settles = append(w.settles, s)
	w.mu.Unlock()
	w.signal()
}

// Flush implements drainer.Settler: it returns once everything queued now
// (or, with nothing queued, the batch being written) is written, or when
// the writer was aborted.
func (w *writer) Flush(ctx context.Context) error {
	w.mu.Lock()
	n := w.queued
	if len(w.appends) == 0 && len(w.settles) == 0 {
		n-- // the write under way may carry what was queued before
	}
	if w.flushed >= n {
		w.mu.Unlock()
		return nil
	}
	ch := make(chan struct{})
	w.waiters[n] = append(w.waiters[n], ch)
	w.mu.Unlock()
	w.signal()
	select {
	case <-ch:
		return nil
	case <-w.abortCtx.Done(): // nothing more is written
		return errWriterAborted
	case <-ctx.Done():
		return ctx.Err()
	}
}

// errWriterAborted is Flush's answer once the writer gave up.
var errWriterAborted = errors.New("the outbox writer stopped at the shutdown deadline")

func (w *writer) signal() {
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// failingFor reports how long writes have been failing (0: they are not).
func (w *writer) failingFor() time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.failing.IsZero() {
		return 0
	}
	return time.Since(w.failing)
}

// run writes batches until stop (then it writes what is queued) or abort.
func (w *writer) run() {
	last := 0
	linger := time.NewTimer(time.Hour)
	linger.Stop()
	var settleBy time.Time // when the queued settlements are written even without an append
	for {
		select {
		case <-w.kick:
		case <-linger.C:
		case <-w.quit:
			for n, _ := w.writeOnce(false); n > 0; n, _ = w.writeOnce(false) {
			}
			return
		case <-w.abortCtx.Done():
			return
		}
		if wait := w.due(&settleBy); wait != 0 {
			if wait > 0 {
				linger.Reset(wait)
			}
			continue
		}
		linger.Stop()
		if last > 1 {
			sleep(w.abortCtx.Done(), writeLinger)
		}
		for {
			n, appends := w.writeOnce(true)
			last = appends
			if n < writeMaxAppends {
				break
			}
		}
	}
}

// due reports how long the queue may wait before the next write: 0 when
// records, a Flush or a full batch of settlements wait, else until
// *settleBy, which it sets when settlements alone wait; -1 when nothing does.
func (w *writer) due(settleBy *time.Time) time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case len(w.appends) > 0 || len(w.waiters) > 0 || len(w.settles) >= writeMaxAppends:
	case len(w.settles) == 0:
		return -1
	case settleBy.IsZero():
		*settleBy = time.Now().Add(settleLinger)
		return settleLinger
	default:
		if wait := time.Until(*settleBy); wait > 0 {
			return wait
		}
	}
	*settleBy = time.Time{}
	return 0
}

// stop makes run write what is queued and return.
func (w *writer) stop() { w.stopOnce.Do(func() { close(w.quit) }) }

// writeOnce writes what is queued (up to writeMaxAppends records); it
// returns how many records and settlements it took, and how many records.
func (w *writer) writeOnce(reserve bool) (n, appends int) {
	w.mu.Lock()
	appends = min(len(w.appends), writeMaxAppends)
	reqs := w.appends[:appends:appends]
	w.appends = w.appends[appends:]
	settles := w.settles
	w.settles = nil
	batch := w.queued
	w.queued++
	w.mu.Unlock()
	if len(reqs) == 0 && len(settles) == 0 {
		w.finish(batch)
		return 0, 0
	}
	groups := *w.groups.Load() // one batch reserves and delivers with the same groups
	b := stores.Batch{Settle: settles, Append: make([]stores.Record, len(reqs))}
	tokens := make([]int64, len(reqs))
	for i, req := range reqs {
		b.Append[i] = req.rec
		tokens[i] = -1 // Reserve not asked
		if g := groups[req.rec.Session]; reserve && g != nil && req.rec.State != stores.Dead {
			tokens[i] = g.Reserve(req.rec.Partition)
		}
		b.Append[i].Token = max(tokens[i], 0)
	}
	start := time.Now()
	w.limits.io.Lock()
	defer w.limits.io.Unlock()
	errs := w.write(&b)
	if errs == nil { // aborted: nothing written, nothing acknowledged
		return len(reqs) + len(settles), len(reqs)
	}
	w.metrics.appendSeconds.Observe(time.Since(start).Seconds())
	w.metrics.appendBatch.Observe(float64(len(reqs)))
	for i := range b.Append {
		rec := &b.Append[i]
		if g := groups[rec.Session]; g != nil {
			g.Delivered(rec, tokens[i])
		}
		orig, stored := &reqs[i].rec, rec
		switch {
		case errs[i] != nil || rec.Seq == 0: // refused, or already there: no room taken
			stored = nil
		case rec.State == stores.Dead: // a dead letter (made at ingest, or the record truncated): counted as dead-lettered
		default:
			w.metrics.persisted.WithLabelValues(rec.Route).Inc()
		}
		w.limits.written(orig, stored)
		reqs[i].done(stored, errs[i])
	}
	w.limits.settled(b.Settle) // those written
	if w.drained != nil {
		w.drained(b.Settle)
	}
	for _, s := range b.Settle {
		if s.Stale {
			w.metrics.stale.WithLabelValues(s.Route).Inc()
		}
	}
	w.finish(batch)
	return len(reqs) + len(settles), len(reqs)
}

// finish wakes the Flush callers waiting for batch (and any before it).
func (w *writer) finish(batch uint64) {
	w.mu.Lock()
	w.flushed = batch
	var wake []chan struct{}
	for n, chs := range w.waiters {
		if n <= batch {
			wake = append(wake, chs...)
			delete(w.waiters, n)
		}
	}
	w.mu.Unlock()
	for _, ch := range wake {
		close(ch)
	}
}

// write commits b, retrying until it succeeds or the writer is aborted
// (then it returns nil). A batch the store refuses as invalid is split
// (settlements apart, appends in halves) until the record at fault is
// alone; it is then replaced by its truncated dead letter, and when even
// that is refused it is left unacknowledged and /readyz says why. It
// returns one error per appended record.
func (w *writer) write(b *stores.Batch) []error {
	errs := make([]error, len(b.Append))
	err := w.retry(b)
	switch {
	case err == nil:
		return errs
	case !errors.Is(err, stores.ErrInvalid):
		return nil // aborted
	}
	b.Settle = w.settleApart(b.Settle)
	w.bisect(b.Append, errs)
	return errs
}

// settleApart writes ss, halving on ErrInvalid, and returns those written; a
// refused one's record stays claimed until a restart, /readyz names its route.
func (w *writer) settleApart(ss []stores.Settlement) []stores.Settlement {
	b := stores.Batch{Settle: ss}
	err := w.retry(&b)
	switch {
	case err == nil || len(ss) == 0:
		return ss
	case !errors.Is(err, stores.ErrInvalid):
		return nil // aborted
	case len(ss) > 1:
		return slices.Concat(w.settleApart(ss[:len(ss)/2]), w.settleApart(ss[len(ss)/2:]))
	}
	err = fmt.Errorf("the store refused the outcome of record %s, which stays claimed until a restart: %w", ss[0].ID, err)
	w.log.Error("settlement refused by the store", "route", ss[0].Route, "record_id", ss[0].ID, "error", err)
	w.metrics.appendErrors.Inc()
	w.limits.refusedRecord(ss[0].Route, err)
	return nil
}

// bisect appends recs, splitting on ErrInvalid down to single records.
func (w *writer) bisect(recs []stores.Record, errs []error) {
	b := stores.Batch{Append: recs}
	err := w.retry(&b)
	switch {
	case err == nil:
		return
	case !errors.Is(err, stores.ErrInvalid): // aborted: nothing of it is durable
		for i := range errs {
			errs[i] = err
		}
		return
	}
	if len(recs) > 1 {
		h := len(recs) / 2
		w.bisect(recs[:h], errs[:h])
		w.bisect(recs[h:], errs[h:])
		return
	}
	rec := &recs[0]
	log := w.log.With("route", rec.Route, "record_id", rec.Envelope.ID)
	dl := stores.Truncate(*rec, "store refused the record: "+err.Error(), time.Now())
	dl.Raw = true
	b = stores.Batch{Append: []stores.Record{dl}}
	if derr := w.retry(&b); derr != nil {
		errs[0] = fmt.Errorf("store refused the record (%v) and its truncated dead letter (%w)", err, derr)
		log.Error("record refused by the store, also as a truncated dead letter: left unacknowledged", "error", errs[0])
		w.limits.refusedRecord(rec.Route, fmt.Errorf("left unacknowledged, holding its receiver: %w", errs[0]))
		return
	}
	log.Warn("record refused by the store: kept as a truncated dead letter", "error", err)
	if rec.State != stores.Dead { // a dead letter made at ingest is counted by its maker
		w.metrics.deadLettered.WithLabelValues(rec.Route).Inc()
	}
	*rec = b.Append[0]
	rec.Token = 0
}

// retry writes b until it succeeds, fails with ErrInvalid, or the writer is
// aborted.
func (w *writer) retry(b *stores.Batch) error {
	for attempt := 1; ; attempt++ {
		err := w.store.Write(w.abortCtx, b)
		answered := err == nil || errors.Is(err, stores.ErrInvalid)
		w.mu.Lock()
		if answered {
			w.failing = time.Time{}
		} else if w.failing.IsZero() {
			w.failing = time.Now()
		}
		w.mu.Unlock()
		if answered {
			return err
		}
		w.metrics.appendErrors.Inc()
		wait := min(10*time.Millisecond<<min(attempt-1, 8), 2*time.Second)
		if attempt == 1 || attempt%50 == 0 {
			w.log.Warn("outbox write failed; retrying", "error", err, "attempt", attempt,
				"records", len(b.Append), "settlements", len(b.Settle), "retry_in", wait)
		}
		if !sleep(w.abortCtx.Done(), wait) {
			w.log.Error("shutdown deadline: records not written are left unacknowledged, outcomes not written are sent again later",
				"records", len(b.Append), "outcomes", len(b.Settle))
			return w.abortCtx.Err()
		}
	}
}
