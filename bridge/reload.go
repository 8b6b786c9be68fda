package bridge

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"sync"
	"time"

	"github.com/gobridge/gobridge/receivers/listener"
	"github.com/gobridge/gobridge/routes"
)

// ErrRefused is matched by the error of a Reload that asks for a change
// only a restart can make; the running configuration keeps running.
var ErrRefused = errors.New("bridge: the new configuration changes what only a restart can change")

// ErrNotRunning is returned by Reload before Run started or once it is
// shutting down.
var ErrNotRunning = errors.New("bridge: not running")

// Reload applies cfg (from routes.Load, without errors) to the running
// bridge by difference (DESIGN.md §11.5): what did not change keeps
// running, and an embedded listener takes changed users and ACLs live. It
// refuses with ErrRefused, changing nothing, what only a restart can
// change. A route that changed or went settles what it holds, within
// shutdown_timeout, before its successor takes messages; one that does not
// is stopped and its receiver reconnects, so that the broker redelivers.
// Reloads run one at a time.
func (b *Bridge) Reload(ctx context.Context, cfg *routes.Config) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.reloading.Store(true)
	defer b.reloading.Store(false)
	if !b.running {
		return ErrNotRunning
	}
	old := b.cur.Load()
	p, err := b.assemble(cfg, old)
	if err != nil {
		return err
	}
	leaving := leavingRoutes(old, p)
	err = b.refusals(ctx, old, p, leaving)
	if err == nil {
		err = b.quiesce(ctx, old, p, leaving)
	}
	if err != nil {
		for _, rc := range old.receivers {
			rc.in.release() // held by quiesce
		}
		p.discard(old)
		return err
	}
	b.apply(old, p)
	return nil
}

// leavingRoutes are the outbox routes of old whose records p would not
// deliver (removed, or moved to another session), by id.
func leavingRoutes(old, p *parts) map[string]*route {
	leaving := map[string]*route{}
	for _, r := range old.routes {
		if s := p.sessions[r.session]; r.cfg.UsesOutbox() && (s == nil || s.members[r.id] == nil) {
			leaving[r.id] = r
		}
	}
	return leaving
}

// quiesce makes the leaving routes deliver, under the old configuration,
// every message they took (DESIGN.md §11.5: nothing may reach a drainer
// that does not know its route). Their receivers hold new messages until
// apply (or Reload, refusing) releases them; the writer commits what the
// routes took and the old drainers deliver it. What is still taken in or pending
// at shutdown_timeout refuses the reload.
func (b *Bridge) quiesce(ctx context.Context, old, p *parts, leaving map[string]*route) error {
	if len(leaving) == 0 {
		return nil
	}
	for _, r := range leaving {
		if rc := old.receiver(r.cfg.Receiver); rc != nil {
			rc.in.hold()
		}
	}
	timeout := b.cfg.Bridge.ShutdownTimeout.D()
	wait, cancel := context.WithTimeout(b.ingestCtx, timeout)
	defer cancel()
	for _, r := range leaving {
		if !settled(wait, &r.busy) {
			// A message still taken in could be committed after the last
			// look below, for a drainer that no longer knows it.
			return fmt.Errorf("%w: route %s is still taking a message in after %s (is its outbox full?): keep the route until it is delivered",
				ErrRefused, r.id, timeout)
		}
	}
	pending := func(ctx context.Context) error {
		if err := b.writer.Flush(ctx); err != nil {
			return err
		}
		orphans, err := b.orphans(ctx, p.sessions, nil)
		return cmp.Or(err, errors.Join(orphans...))
	}
	why := pending(wait)
	for why != nil && sleep(wait.Done(), 20*time.Millisecond) { // polling the store's counts
		why = pending(wait)
	}
	if wait.Err() != nil && b.ingestCtx.Err() == nil { // the last look was cut short: one more
		last, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		defer context.AfterFunc(b.ingestCtx, cancel)() // not past a shutdown
		why = pending(last)
	}
	if why == nil {
		return nil
	}
	return fmt.Errorf("%w: %w, still pending after %s: keep the route until they are delivered", ErrRefused, why, timeout)
}

// refusals says why p cannot replace old in this process (nil: it can).
func (b *Bridge) refusals(ctx context.Context, old, p *parts, leaving map[string]*route) error {
	var errs []error
	was, is := old.cfg, p.cfg
	changed := func(what string, a, b any) {
		if !reflect.DeepEqual(a, b) {
			errs = append(errs, fmt.Errorf("%s changed", what))
		}
	}
	changed("bridge.id", was.Bridge.ID, is.Bridge.ID)
	changed("bridge.admin (the admin listener, its token, allowed_hosts)", was.Bridge.Admin, is.Bridge.Admin)
	changed("bridge.shutdown_timeout", was.Bridge.ShutdownTimeout, is.Bridge.ShutdownTimeout)
	changed("bridge.lease_ttl", was.Bridge.LeaseTTL, is.Bridge.LeaseTTL)
	changed("bridge.log.format", was.Bridge.Log.Format, is.Bridge.Log.Format)
	changed("stores (the outbox store)", was.Stores, is.Stores)
	for id, s := range p.sessions {
		if o := old.sessions[id]; o != nil && o.partitions != s.partitions {
			errs = append(errs, fmt.Errorf("session %s: partitions changed from %d to %d (records are placed by them: change it while the session's outbox is empty)", id, o.partitions, s.partitions))
		}
	}
	if b.store != nil {
		up := maps.Clone(leaving) // quiesce lets them deliver what they hold
		maps.DeleteFunc(up, func(_ string, r *route) bool { return !r.health.Up() })
		orphans, err := b.orphans(ctx, p.sessions, up)
		if err != nil {
			return err
		}
		for _, o := range orphans {
			if !errors.Is(o, errBeyondPartitions) { // another instance's partitions: its own advice
				o = fmt.Errorf("%w, which the new configuration does not deliver: keep the route until they are delivered", o)
			}
			errs = append(errs, o)
		}
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %w; restart gobridge to apply it", ErrRefused, errors.Join(errs...))
}

// apply replaces old with p (see Reload).
func (b *Bridge) apply(old, p *parts) {
	for _, o := range old.receivers {
		if k := p.receiver(o.id); k == nil || k.r != o.r {
			o.run.stop()
		}
	}
	b.prepare(p)
	for _, rc := range old.receivers {
		rc.in.release() // held by quiesce; they take messages under p now
	}
	for _, rc := range p.receivers {
		if rc.run == nil {
			b.startReceiver(rc, false)
		} else if l, ok := rc.r.(*listener.Listener); ok { // kept: users and ACLs apply live
			o := listenerOptions(rc.cfg, nil)
			if err := l.SetUsers(o.Users, o.Anonymous, o.AllowAnonymous); err != nil {
				b.log.Error("reload: users and ACLs not applied", "receiver", rc.id, "error", err)
			}
		}
	}
	// Routes that changed or went settle what they hold; their successors
	// wait meanwhile.
	var retired []*route
	for _, r := range old.routes {
		if p.route(r.id) != r {
			retired = append(retired, r)
		}
	}
	wait, cancel := context.WithTimeout(b.ingestCtx, b.cfg.Bridge.ShutdownTimeout.D())
	defer cancel()
	for _, r := range retired {
		if !settled(wait, &r.busy) {
			b.log.Warn("reload: the route did not settle what it holds in time: it stops and its receiver reconnects, so that the source sends those messages again",
				"route", r.id, "receiver", r.cfg.Receiver)
			r.stop()
			r.cancel()
			for i, rc := range p.receivers {
				if o := old.receiver(rc.id); rc.id == r.cfg.Receiver && o != nil && o.r == rc.r {
					rc.run.stop()
					if nr, err := b.newRecv(rc.cfg); err != nil {
						b.log.Error("reload: restart receiver", "receiver", rc.id, "error", err)
					} else {
						nr.in.set(p.routesOf(rc.id))
						b.startReceiver(nr, false)
						p.receivers[i] = nr
					}
				}
			}
		}
		r.busy.Wait()
		r.stop()
		r.cancel()
		r.workers.Wait()
		// Keys with records in the outbox keep going there, in order. (The
		// old fallback is idle now; the new one waits for its ready.)
		if n := p.route(r.id); n != nil && n.fallback != nil && r.fallback != nil {
			r.fallback.mu.Lock()
			n.fallback.sticky, n.fallback.newest = maps.Clone(r.fallback.sticky), maps.Clone(r.fallback.newest)
			n.fallback.unknown = r.fallback.unknown
			r.fallback.mu.Unlock()
		}
	}
	// Sessions that changed or went stop, then their successors start.
	for id, s := range old.sessions {
		if p.sessions[id] != s {
			s.run.stop()
		}
	}
	if b.writer != nil {
		b.writer.setGroups(p.sessions)
		// A write begun with the old groups appends unclaimed records that
		// no new group counts as pending: it must commit before a new
		// group's first claim, or the records the new group then takes on
		// the hot path overtake them (per-key order).
		if err := b.writer.Flush(b.ingestCtx); err != nil {
			b.log.Warn("reload: flush the outbox writer before the new drainers start", "error", err)
		}
	}
	for _, s := range p.sessions {
		if s.run == nil {
			b.startSession(s)
		}
	}
	for _, r := range p.routes { // new routes take messages now that their drainers know them
		if r.ready != nil && old.route(r.id) != r {
			close(r.ready)
		}
	}
	for id, s := range old.senders {
		if p.senders[id] != s {
			if err := s.close(); err != nil {
				b.log.Warn("close", "sender", id, "error", err)
			}
		}
	}
	b.cur.Store(p)
	b.forget(old, p) // after the Store: what sets series reads p
	b.log.Info("config reloaded", "routes", len(p.routes), "replaced_routes", len(retired),
		"receivers", len(p.receivers), "sessions", len(p.sessions))
}

// settled waits until wg is done; false when ctx ends first (its goroutine
// ends with wg, which the caller then waits for).
func settled(ctx context.Context, wg *sync.WaitGroup) bool {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
		return true
	case <-ctx.Done():
		return false
	}
}

// prepare makes admission, metrics and the journal know p's parts before a
// message reaches them, and points each receiver's ingest at its routes.
func (b *Bridge) prepare(p *parts) {
	b.limits.configure(p)
	for _, r := range p.routes {
		b.metrics.initRoute(r.id)
		if r.hold == nil {
			b.journal.Register(r.session, r.id)
		}
	}
	for id, s := range p.senders {
		b.metrics.senderUp.WithLabelValues(id).Set(b2f(s.health.Up()))
	}
	for _, rc := range p.receivers {
		b.metrics.initReceiver(rc.id)
		rc.in.set(p.routesOf(rc.id))
	}
}

// task is a running receiver or drainer group.
type task struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// stop cancels the task and waits for it.
func (t *task) stop() {
	t.cancel()
	<-t.done
}

// exited reports whether a started task has returned (a failed receiver).
func (t *task) exited() bool {
	if t == nil {
		return false
	}
	select {
	case <-t.done:
		return true
	default:
		return false
	}
}

// spawn runs fn in a goroutine that wg counts, under its own context.
func spawn(parent context.Context, wg *sync.WaitGroup, fn func(ctx context.Context)) *task {
	ctx, cancel := context.WithCancel(parent)
	t := &task{cancel: cancel, done: make(chan struct{})}
	wg.Go(func() {
		defer close(t.done)
		fn(ctx)
	})
	return t
}

// startSession starts s's drainer group.
func (b *Bridge) startSession(s *session) {
	s.run = spawn(b.drainCtx, &b.drains, func(ctx context.Context) {
		if err := s.group.Run(ctx); err != nil {
			b.fail(fmt.Errorf("drainer %s: %w", s.id, err))
		}
	})
}

// startReceiver starts rc. A failure of a receiver that Run started
// (fatal) stops the bridge; one that a reload started is logged (and
// /readyz reports it).
func (b *Bridge) startReceiver(rc *recv, fatal bool) {
	rc.run = spawn(b.ingestCtx, &b.recvs, func(ctx context.Context) {
		err := rc.r.Run(ctx)
		switch {
		case err == nil || ctx.Err() != nil:
		case fatal:
			b.fail(fmt.Errorf("receiver %s: %w", rc.id, err))
		default:
			b.log.Error("receiver failed", "receiver", rc.id, "error", err)
		}
	})
}
