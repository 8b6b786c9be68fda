package drainer

import (
	"cmp"
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/gobridge/gobridge/stores"
)

// settleTimeout bounds the final flush of a partition's settlements and the
// release of its lease at shutdown.
const settleTimeout = 10 * time.Second

// partition is the loop of one session partition whose lease this instance
// holds. The writer side (reserve, delivered) and the loop share mu; the
// loop alone touches the schedule.
type partition struct {
	g *Group
	n int

	// renewed is when (runtime clock) the last acquisition or renewal of
	// the lease began; only the membership loop touches it.
	renewed time.Time

	mu        sync.Mutex
	l         stores.Lease
	inbox     []stores.Record // delivered by the writer or claimed, not yet scheduled
	parked    []stores.Record // claimed while the writer held reservations (see claim)
	held      int             // records in the inbox or the schedule
	reserved  int             // rooms promised to the writer
	backlog   bool            // the store may hold unclaimed records of this partition
	unclaimed uint64          // records the writer appended unclaimed (a version)
	wake      chan struct{}

	// stopCtx is cancelled to stop gracefully (shutdown, rebalance);
	// lostCtx when the lease is lost (no more state changes). workCtx, the
	// parent of every send, ends at once on loss and ShutdownTimeout after
	// a stop.
	stopCtx    context.Context
	stopFn     context.CancelFunc
	lostCtx    context.Context
	loseFn     context.CancelFunc
	workCtx    context.Context
	cancelWork context.CancelFunc

	rnd   *rand.Rand
	sched *schedule
	// after is the last Seq a claim returned: every record below it is
	// held or settled. Hot-path Seqs do not count: another instance may
	// append unclaimed records below them.
	after    int64
	seen     uint64 // the unclaimed version the last claim started at
	full     bool   // the last claim filled its limit: more may wait
	results  chan sendResult
	inflight int
}

func newPartition(g *Group, n int, l stores.Lease) *partition {
	p := &partition{
		g: g, n: n, l: l, backlog: true, wake: make(chan struct{}, 1),
		rnd: rand.New(rand.NewPCG(uint64(l.Token), uint64(n))), sched: newSchedule(),
		results: make(chan sendResult, g.opts.Window),
	}
	p.lostCtx, p.loseFn = context.WithCancel(context.Background())
	p.stopCtx, p.stopFn = context.WithCancel(p.lostCtx)
	p.workCtx, p.cancelWork = context.WithCancel(p.lostCtx)
	return p
}

func (p *partition) lease() stores.Lease {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.l
}

func (p *partition) setLease(l stores.Lease) {
	p.mu.Lock()
	p.l = l
	p.mu.Unlock()
}

func (p *partition) stop()          { p.stopFn() }
func (p *partition) stopping() bool { return p.stopCtx.Err() != nil }
func (p *partition) lose()          { p.loseFn() }
func (p *partition) lost() bool     { return p.lostCtx.Err() != nil }

func (p *partition) signal() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// reserve implements Group.Reserve.
func (p *partition) reserve() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopping() {
		return 0
	}
	if p.backlog || p.held+p.reserved >= p.g.opts.Window {
		p.backlog = true // later records must queue behind this one
		p.unclaimed++
		return 0
	}
	p.reserved++
	return p.l.Token
}

// delivered implements Group.Delivered.
func (p *partition) delivered(rec *stores.Record, reserved int64) {
	p.mu.Lock()
	mine := reserved > 0 && reserved == p.l.Token
	if mine {
		p.reserved--
	}
	switch {
	case rec.Seq == 0: // a duplicate, or absorbed by coalescing
	case mine && rec.Token == reserved && !p.stopping():
		p.inbox = append(p.inbox, *rec)
		p.held++
	case rec.Token == 0:
		p.backlog = true
		p.unclaimed++
	}
	p.unpark()
	p.mu.Unlock()
	p.signal()
}

// unpark moves the parked claimed records to the inbox once the writer
// holds no reservation: every record it committed before them is then in
// the inbox or scheduled. p.mu must be held.
func (p *partition) unpark() {
	if p.reserved == 0 && len(p.parked) > 0 {
		p.inbox = append(p.inbox, p.parked...)
		p.parked = nil
	}
}

// run is the partition's loop. It reports on exited once it has finished,
// after releasing its lease (unless the lease was lost).
func (p *partition) run(exited chan<- *partition) {
	g := p.g
	defer func() { exited <- p }()
	defer p.cancelWork()
	stopTimer := context.AfterFunc(p.stopCtx, func() {
		t := time.AfterFunc(g.opts.ShutdownTimeout, p.cancelWork)
		context.AfterFunc(p.workCtx, func() { t.Stop() })
	})
	defer stopTimer()

	log := g.log.With("partition", p.n)
	w := &waker{p: g.opts.Poll}
	var nextPoll time.Time
	errStreak, steps := 0, 0
	for !p.stopping() {
		now := g.now()
		if n := g.clock.Steps(); n != steps { // the wall clock was stepped
			steps, nextPoll = n, time.Time{}
			p.sched.bound(now)
		}
		p.absorb(now)
		if p.wantClaim(now, nextPoll) {
			found, err := p.claim()
			switch {
			case err != nil && p.lost():
			case err != nil:
				errStreak++
				if errStreak == 1 || errStreak%100 == 0 {
					log.Error("claim records", "error", err, "streak", errStreak)
				}
			default:
				errStreak = 0
			}
			nextPoll = g.now().Add(w.next(found > 0, p.rnd))
			continue
		}
		nextDue := p.sched.tick(now)
		slot := g.note.wait() // before launching, so that no release is missed
		probeWait, limited := p.launch(now)
		if !limited {
			slot = nil
		}
		p.wait(now, nextDue, nextPoll, probeWait, slot)
	}
	// Stopping: launch nothing more, collect what is in flight (workCtx
	// cuts it short at ShutdownTimeout), then make the outcomes durable
	// before the lease goes, so that the next owner does not resend them.
	for p.inflight > 0 {
		p.handle(<-p.results)
	}
	if p.lost() {
		log.Warn("stopped draining: lease lost")
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), settleTimeout)
	defer cancel()
	if err := g.settler.Flush(ctx); err != nil {
		log.Warn("flush settlements before releasing the partition", "error", err)
	}
	if err := g.store.Release(ctx, p.lease()); err != nil && !errors.Is(err, stores.ErrLeaseLost) {
		log.Warn("release partition lease", "error", err)
	}
	log.Info("stopped draining")
}

// wantClaim reports whether the loop should claim from the store now: it
// has room, and a poll is due or the store holds a backlog of the
// partition that the last claim did not exhaust (it filled its limit, or
// the writer appended unclaimed records since it started). A backlog is
// claimed a batch at a time: once a batch has room, or when what the loop
// holds runs below one; not a record for each one settled.
func (p *partition) wantClaim(now, nextPoll time.Time) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	o := p.g.opts
	room := o.Window - p.held - p.reserved
	batch := room >= o.BatchSize || p.held+p.reserved < o.BatchSize
	return room > 0 && (!now.Before(nextPoll) || (batch && p.backlog && (p.full || p.unclaimed != p.seen)))
}

// claim takes what the store holds for the partition beyond what the loop
// holds, up to its room, and reports how many records it found.
func (p *partition) claim() (int, error) {
	g := p.g
	p.mu.Lock()
	limit := min(g.opts.Window-p.held-p.reserved, g.opts.BatchSize)
	version := p.unclaimed
	token := p.l.Token
	p.mu.Unlock()
	p.seen, p.full = version, false
	recs, err := g.store.Claim(p.lostCtx, stores.ClaimRequest{
		Session: g.opts.Session, Partition: p.n, Token: token, Limit: limit, After: p.after,
	})
	if err != nil {
		if errors.Is(err, stores.ErrLeaseLost) {
			p.lose()
		}
		return 0, err
	}
	p.full = len(recs) >= limit
	for i := range recs {
		p.after = max(p.after, recs[i].Seq)
	}
	p.mu.Lock()
	p.held += len(recs)
	// The store holds nothing more, unless the writer is still committing
	// records that go unclaimed (the claim could not see them): those it
	// reserved that are not this partition's hot ones. Reserve and
	// Delivered count them in g.pending before and after the partition
	// does, so this never undercounts. Only then may the writer hand
	// records over, or they would overtake.
	if len(recs) < limit && p.unclaimed == version && g.pending[p.n].Load() == int64(p.reserved) {
		p.backlog = false
	}
	// The claimed records are scheduled with the handed-over ones, in Seq
	// order (absorb). While the writer holds reservations, the batch it is
	// writing may have committed records this claim took behind reserved
	// ones it has not handed over yet (the window filled mid-batch): they
	// wait for them, parked.
	p.parked = append(p.parked, recs...)
	p.unpark()
	p.mu.Unlock()
	return len(recs), nil
}

// absorb schedules the records the writer delivered and the claims took,
// in Seq order (commit order, which per-key order follows).
func (p *partition) absorb(now time.Time) {
	p.mu.Lock()
	in := p.inbox
	p.inbox = nil
	p.mu.Unlock()
	bySeq := func(a, b stores.Record) int { return cmp.Compare(a.Seq, b.Seq) }
	if !slices.IsSortedFunc(in, bySeq) {
		slices.SortStableFunc(in, bySeq)
	}
	for _, rec := range in {
		p.schedule(rec, now)
	}
}

// schedule takes one held record into the schedule. Its stored times are
// wall-clock readings that a step of the clock may have moved (see
// stores.Clock): it is due at most backoff.max_interval from now, and it
// expires at most its TTL from now, on the clock as it is now.
func (p *partition) schedule(rec stores.Record, now time.Time) {
	it := &item{rec: rec, due: rec.NextAttemptAt, scheduled: now}
	it.env = &it.rec.Envelope
	r := p.g.routes[rec.Route]
	if r == nil {
		p.settleNow(it, stores.DeadLetter, "unknown route "+rec.Route+": not in this bridge's configuration", ResultDeadLettered, now)
		return
	}
	it.route = r
	if limit := now.Add(r.Policy.Backoff.Max); it.due.After(limit) {
		it.due = limit
	}
	if e := rec.ExpiresAt; !e.IsZero() {
		received := rec.Envelope.ReceivedAt
		if received.IsZero() {
			received = rec.CreatedAt
		}
		it.expires = p.g.clock.Rebase(e, received)
		if ttl := e.Round(0).Sub(received.Round(0)); !received.IsZero() && it.expires.After(now.Round(0).Add(ttl)) {
			it.expires = now.Round(0).Add(ttl)
		}
	}
	if rec.Raw && r.Prepare != nil {
		// Its ordering key comes from the processors: run them before it
		// takes its place behind its key. A failure or a filter is settled
		// when it reaches the head (prepare).
		env := rec.Envelope.Clone()
		if drop, err := r.Prepare(env); err == nil && !drop {
			it.env, it.prepared = env, true
		}
	}
	switch old := p.sched.add(it, now); old {
	case nil:
	case it: // a newer message of its coalesce key is held
		p.settleNow(it, stores.Done, "coalesced", ResultCoalesced, now)
	default:
		p.settle(old, stores.Done, "coalesced", ResultCoalesced, now)
	}
}

// wait blocks until a result, a delivery, the next due record, the next
// poll, the next probe, a free concurrency slot (when limited) or a stop.
func (p *partition) wait(now, nextDue, nextPoll time.Time, probeWait time.Duration, slot <-chan struct{}) {
	d := time.Hour
	if !nextDue.IsZero() {
		d = min(d, nextDue.Sub(now))
	}
	if p.hasRoom() {
		d = min(d, nextPoll.Sub(now))
	}
	if probeWait > 0 {
		d = min(d, probeWait)
	}
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case res := <-p.results:
		p.handle(res)
		p.collect()
	case <-p.wake:
	case <-slot:
	case <-t.C:
	case <-p.stopCtx.Done():
	}
}

func (p *partition) hasRoom() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.held+p.reserved < p.g.opts.Window
}
