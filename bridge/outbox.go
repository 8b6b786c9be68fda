package bridge

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/gobridge/gobridge/routes"
	"github.com/gobridge/gobridge/stores"
)

// Group commit tuning.
const (
	// commitMaxBatch is the most records appended in one call.
	commitMaxBatch = 256
	// commitLinger is how long a batch waits for more records when the
	// previous batch had several (under load); a lone record never waits.
	commitLinger = time.Millisecond
	// depthPoll is how often a blocked session re-reads its depth.
	depthPoll = 20 * time.Millisecond
)

// appendReq is one record waiting for the group commit.
type appendReq struct {
	rec    stores.Record
	r      *route
	settle func()
}

// committer is the single writer of an outbox store: it collects records
// from every shared_outbox route, appends them in one call per batch, then
// settles them in arrival order and wakes the drainers of the partitions it
// touched. It also gates ingest on each session's max_outbox_depth.
type committer struct {
	store   stores.Outbox
	metrics *metrics
	log     *slog.Logger
	in      chan appendReq
	quit    chan struct{} // closed by stop: flush what is queued, then return
	// abortCtx is cancelled by abort: give up retrying appends.
	abortCtx context.Context
	abort    context.CancelFunc
	stopOne  sync.Once

	depths map[string]*depth
}

// depth is a session's backlog as ingest sees it: the store's pending count
// (refreshed after every batch and while someone waits) plus the records
// admitted but not yet appended.
type depth struct {
	mu      sync.Mutex
	pending int
	queued  int
	version uint64
	waiters int
	changed chan struct{} // closed and replaced on every change
}

func newCommitter(store stores.Outbox, m *metrics, log *slog.Logger, sessions map[string]*sessionInfo) *committer {
	c := &committer{
		store: store, metrics: m, log: log.With("component", "committer"),
		in: make(chan appendReq, 4*commitMaxBatch), quit: make(chan struct{}),
		depths: map[string]*depth{},
	}
	c.abortCtx, c.abort = context.WithCancel(context.Background())
	for sid := range sessions {
		c.depths[sid] = &depth{pending: -1, changed: make(chan struct{})}
	}
	return c
}

// submit admits rec (blocking while its session is at max_outbox_depth) and
// queues it for the group commit. It returns false, without queueing, when
// ctx ended first.
func (c *committer) submit(ctx context.Context, r *route, rec stores.Record, settle func()) bool {
	limit := cmp.Or(r.cfg.Policy.MaxOutboxDepth, 10000)
	start := time.Now()
	if !c.admit(ctx, rec.Session, limit) {
		return false
	}
	if waited := time.Since(start); waited > depthPoll {
		c.metrics.backpressure.WithLabelValues(rec.Session).Add(waited.Seconds())
	}
	select {
	case c.in <- appendReq{rec: rec, r: r, settle: settle}:
		return true
	case <-ctx.Done():
		c.unadmit(rec.Session, 1)
		return false
	}
}

// admit reserves room for one record of session under limit.
func (c *committer) admit(ctx context.Context, session string, limit int) bool {
	d := c.depths[session]
	for {
		d.mu.Lock()
		if d.pending < 0 { // never read: read it now (and retry calmly)
			d.mu.Unlock()
			c.refresh(ctx, session)
			d.mu.Lock()
			unread := d.pending < 0
			d.mu.Unlock()
			if unread && !sleepCtx(ctx, depthPoll) {
				return false
			}
			continue
		}
		if d.pending+d.queued < limit {
			d.queued++
			d.mu.Unlock()
			return true
		}
		d.waiters++
		ch := d.changed
		d.mu.Unlock()
		t := time.NewTimer(depthPoll)
		var ok bool
		select {
		case <-ch:
			ok = true
		case <-t.C:
			ok = true
			c.refresh(ctx, session)
		case <-ctx.Done():
		}
		t.Stop()
		d.mu.Lock()
		d.waiters--
		d.mu.Unlock()
		if !ok {
			return false
		}
	}
}

func (c *committer) unadmit(session string, n int) {
	d := c.depths[session]
	d.mu.Lock()
	d.queued -= n
	d.version++
	close(d.changed)
	d.changed = make(chan struct{})
	d.mu.Unlock()
}

// refresh reads the session's pending count from the store. A read that
// raced with a commit (the version moved) is discarded.
func (c *committer) refresh(ctx context.Context, session string) {
	d := c.depths[session]
	d.mu.Lock()
	v := d.version
	d.mu.Unlock()
	st, err := c.store.Stats(ctx, session)
	if err != nil {
		if ctx.Err() == nil {
			c.log.Warn("read outbox depth", "session", session, "error", err)
		}
		return
	}
	d.mu.Lock()
	if d.version == v {
		d.pending = st.Pending
		d.version++
		close(d.changed)
		d.changed = make(chan struct{})
	}
	d.mu.Unlock()
	c.metrics.pending.WithLabelValues(session).Set(float64(st.Pending))
}

// committed updates a session after a batch: n fewer queued records, n
// more pending. Only this committer appends to the session in this process,
// and drainers only shrink it, so the estimate never undercounts here; the
// store's count is re-read while ingest waits and by the monitor every
// second (which also covers other instances appending to a shared store).
func (c *committer) committed(session string, n int) {
	d := c.depths[session]
	d.mu.Lock()
	d.queued -= n
	d.pending += n
	d.version++
	close(d.changed)
	d.changed = make(chan struct{})
	d.mu.Unlock()
}

// run commits batches until stop (then it flushes what is queued) or abort.
// The runtime owns the goroutine that calls it.
func (c *committer) run() {
	batch := make([]appendReq, 0, commitMaxBatch)
	last := 0
	for {
		var first appendReq
		select {
		case first = <-c.in:
		case <-c.quit:
			c.flushQueued(batch)
			return
		}
		batch = append(batch[:0], first)
		batch = c.gather(batch, last > 1)
		last = len(batch)
		if !c.flush(batch) {
			return
		}
	}
}

// gather adds queued records to batch, lingering briefly under load.
func (c *committer) gather(batch []appendReq, linger bool) []appendReq {
	var t *time.Timer
	for len(batch) < commitMaxBatch {
		select {
		case req := <-c.in:
			batch = append(batch, req)
			continue
		default:
		}
		if !linger {
			break
		}
		if t == nil {
			t = time.NewTimer(commitLinger)
			defer t.Stop()
		}
		select {
		case req := <-c.in:
			batch = append(batch, req)
			continue
		case <-t.C:
		}
		break
	}
	return batch
}

// flushQueued commits what was queued before stop.
func (c *committer) flushQueued(batch []appendReq) {
	for {
		batch = c.gather(batch[:0], false)
		if len(batch) == 0 {
			return
		}
		if !c.flush(batch) {
			return
		}
	}
}

// flush appends batch durably (retrying with backoff, never dropping a
// record that the store could take), then settles it in arrival order. It
// returns false when abort interrupted it: nothing of the batch is settled.
func (c *committer) flush(batch []appendReq) bool {
	recs := make([]stores.Record, len(batch))
	for i, req := range batch {
		recs[i] = req.rec
	}
	ctx := c.abortCtx
	start := time.Now()
	ok := c.appendAll(ctx, batch, recs)
	if !ok {
		return false
	}
	c.metrics.appendSeconds.Observe(time.Since(start).Seconds())
	c.metrics.appendBatch.Observe(float64(len(batch)))

	type part struct {
		session   string
		partition int
	}
	touched := map[part]*route{}
	perSession := map[string]int{}
	for _, req := range batch {
		if req.rec.Envelope.ID != "" { // cleared when the store rejected it
			c.metrics.persisted.WithLabelValues(req.r.id).Inc()
		}
		touched[part{req.rec.Session, req.rec.Partition}] = req.r
		perSession[req.rec.Session]++
	}
	for _, req := range batch {
		req.settle()
	}
	for p, r := range touched {
		if r.group != nil {
			r.group.Wake(p.partition)
		}
	}
	for s, n := range perSession {
		c.committed(s, n)
	}
	return true
}

// appendAll appends recs, retrying transient failures. A batch the store
// rejects as invalid is appended record by record, and records rejected on
// their own are dropped with an error log (they could never be stored).
func (c *committer) appendAll(ctx context.Context, batch []appendReq, recs []stores.Record) bool {
	for attempt := 1; ; attempt++ {
		err := c.store.Append(ctx, recs...)
		if err == nil {
			return true
		}
		if errors.Is(err, stores.ErrInvalid) && len(recs) > 1 {
			for i := range recs {
				if !c.appendAll(ctx, batch[i:i+1], recs[i:i+1]) {
					return false
				}
			}
			return true
		}
		if errors.Is(err, stores.ErrInvalid) {
			req := &batch[0]
			c.metrics.dropped.WithLabelValues(req.r.id).Inc()
			c.log.Error("outbox rejected a record; dropped", "route", req.r.id, "record_id", req.rec.Envelope.ID, "error", err)
			req.rec.Envelope.ID = ""
			return true
		}
		c.metrics.appendErrors.Inc()
		wait := backoffDelay(attempt, routes.Backoff{
			InitialInterval: routes.Duration(10 * time.Millisecond), MaxInterval: routes.Duration(2 * time.Second), Multiplier: 2,
		}, 0)
		c.log.Warn("append to outbox failed; retrying", "error", err, "attempt", attempt, "records", len(recs), "retry_in", wait)
		if !sleepCtx(ctx, wait) {
			c.log.Error("shutdown deadline: records not persisted are left unacknowledged", "records", len(recs))
			return false
		}
	}
}

// stop makes run flush what is queued and return.
func (c *committer) stop() { c.stopOne.Do(func() { close(c.quit) }) }
