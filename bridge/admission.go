package bridge

import (
	"cmp"
	"context"
	"maps"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/gobridge/gobridge/stores"
)

// refreshWhileBlocked is how often ingest that waits for room re-reads the
// store's counts (other instances, and drained bytes, only show there).
const refreshWhileBlocked = 100 * time.Millisecond

// admission keeps each session under its max_outbox_depth and
// max_outbox_bytes and each route under its max_dead_letters (DESIGN.md
// §1.3, §11.1, §11.8): ingest waits in admit while a limit is reached, so
// the broker's flow control pushes back. Counts are the store's (re-read
// every second and while someone waits) plus what this process wrote or
// admitted since.
type admission struct {
	read func(ctx context.Context) ([]stores.SessionStats, error)

	// io orders a refresh's read of the store with the writer's writes: the
	// writer holds it from a Write until its effects are counted, so a read
	// never sees a write the counts do not show yet. Taken before mu.
	io sync.Mutex

	mu       sync.Mutex
	sessions map[string]*tally // live records and their bytes
	routes   map[string]*tally // dead letters (no byte limit)
	changed  chan struct{}     // closed and replaced on every change
	lastRead time.Time
	refused  map[string]string // route -> why its last record could not be stored at all
}

// tally is what one session or route holds against its limits.
type tally struct {
	max            int
	maxBytes       int64
	n              int
	bytes          int64
	unwritten      int // admitted, not written yet: a refresh adds them to the store's counts
	unwrittenBytes int64
	waitedTo       time.Time // how far waiting at this limit is counted: each moment once
}

func (t *tally) full() bool { return t.n >= t.max || t.bytes >= t.maxBytes }

func newAdmission(read func(ctx context.Context) ([]stores.SessionStats, error)) *admission {
	return &admission{read: read, sessions: map[string]*tally{}, routes: map[string]*tally{},
		changed: make(chan struct{}), refused: map[string]string{}}
}

// configure sets the limits of p's sessions and routes, keeping their
// counts, and forgets the sessions and routes p does not have.
func (a *admission) configure(p *parts) {
	a.mu.Lock()
	defer a.mu.Unlock()
	sessions, routes := map[string]*tally{}, map[string]*tally{}
	for id, s := range p.sessions {
		sessions[id] = cmp.Or(a.sessions[id], &tally{})
		sessions[id].max, sessions[id].maxBytes = s.maxLive, s.maxBytes
	}
	for _, r := range p.routes {
		routes[r.id] = cmp.Or(a.routes[r.id], &tally{})
		routes[r.id].max, routes[r.id].maxBytes = r.cfg.Policy.MaxDeadLetters, math.MaxInt64
	}
	a.sessions, a.routes = sessions, routes
	maps.DeleteFunc(a.refused, func(id string, _ string) bool { return routes[id] == nil })
	a.notify()
}

// admit waits until rec fits under its session's (or, a dead letter, its
// route's) limits and reserves the room; it reports false, reserving
// nothing, when ctx ended first. While it waits it tells blocked (when not
// nil), at least every refreshWhileBlocked, how much longer ingest waited
// at this limit, each moment once however many wait.
func (a *admission) admit(ctx context.Context, rec *stores.Record, blocked func(time.Duration)) bool {
	var waiting time.Time // when this call began to wait
	for {
		a.mu.Lock()
		t := a.tallyOf(rec)
		ok := t == nil || !t.full()
		if ok {
			a.add(rec, 1, 1)
		}
		var waited time.Duration
		if now := time.Now(); t != nil && !waiting.IsZero() {
			from := waiting
			if t.waitedTo.After(from) {
				from = t.waitedTo
			}
			waited, t.waitedTo = now.Sub(from), now
		} else if !ok {
			waiting = now
		}
		ch, stale := a.changed, time.Since(a.lastRead) >= refreshWhileBlocked
		a.mu.Unlock()
		if waited > 0 && blocked != nil {
			blocked(waited)
		}
		if ok {
			return true
		}
		if stale {
			a.refresh(ctx, false)
			continue
		}
		timer := time.NewTimer(refreshWhileBlocked)
		select {
		case <-ch:
		case <-timer.C:
		case <-ctx.Done():
			timer.Stop()
			return false
		}
		timer.Stop()
	}
}

// tallyOf is what rec counts against: its route's dead letters, or its
// session's live records (nil: not limited here).
func (a *admission) tallyOf(rec *stores.Record) *tally {
	if rec.State == stores.Dead {
		return a.routes[rec.Route]
	}
	return a.sessions[rec.Session]
}

// add adds n records like rec to the counts, of which unwritten are
// admitted and not written yet (negative numbers take them away).
func (a *admission) add(rec *stores.Record, n, unwritten int) {
	if t := a.tallyOf(rec); t != nil {
		size := rec.Size()
		t.n += n
		t.bytes += int64(n) * size
		t.unwritten += unwritten
		t.unwrittenBytes += int64(unwritten) * size
	}
	if n != 0 {
		a.notify()
	}
}

// written notes the store's answer for an admitted record rec: it holds it
// now as stored (maybe its truncated dead letter), or, with stored nil, not
// at all. The writer calls it holding io.
func (a *admission) written(rec, stored *stores.Record) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if stored != nil && (stored.State == stores.Dead) == (rec.State == stores.Dead) {
		a.add(rec, 0, -1) // it counts where it was admitted
		return
	}
	a.add(rec, -1, -1)
	if stored != nil {
		a.add(stored, 1, 0)
	}
}

// settled applies the drainers' settlements written in one batch: done and
// dead-lettered records leave their session (their bytes go at the next
// refresh), dead letters count on their route, dropped ones leave it.
func (a *admission) settled(ss []stores.Settlement) {
	if len(ss) == 0 {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, s := range ss {
		if s.Stale {
			continue
		}
		switch s.Outcome {
		case stores.Done, stores.DeadLetter:
			if t := a.sessions[s.Session]; t != nil {
				t.n--
			}
			if t := a.routes[s.Route]; t != nil && s.Outcome == stores.DeadLetter {
				t.n++
			}
		case stores.Drop:
			if t := a.routes[s.Route]; t != nil {
				t.n--
			}
		}
	}
	a.notify()
}

// refresh re-reads the store's counts and adds what is admitted and not
// written yet. It waits while the writer writes; with try it skips the read
// instead (the writer may retry a failing store for long: the monitor must
// not stall).
func (a *admission) refresh(ctx context.Context, try bool) {
	a.mu.Lock()
	a.lastRead = time.Now()
	a.mu.Unlock()
	if try && !a.io.TryLock() {
		return
	} else if !try {
		a.io.Lock()
	}
	defer a.io.Unlock()
	stats, err := a.read(ctx)
	if err != nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, m := range []map[string]*tally{a.sessions, a.routes} {
		for _, t := range m {
			t.n, t.bytes = t.unwritten, t.unwrittenBytes
		}
	}
	for _, st := range stats {
		if t := a.sessions[st.Session]; t != nil {
			t.n += st.Live
			t.bytes += st.Bytes
		}
		for route, rc := range st.Routes {
			if t := a.routes[route]; t != nil {
				t.n += rc.Dead
			}
		}
	}
	a.notify()
}

// notify wakes the admissions waiting for room. Called holding mu.
func (a *admission) notify() {
	close(a.changed)
	a.changed = make(chan struct{})
}

// live counts session's live records.
func (a *admission) live(session string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	if t := a.sessions[session]; t != nil {
		return t.n
	}
	return 0
}

// deadFull reports whether route holds max_dead_letters.
func (a *admission) deadFull(route string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	t := a.routes[route]
	return t != nil && t.full()
}

// full lists the sessions and routes at a limit now, sorted, for /readyz.
func (a *admission) full() (sessions, routes []string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	fulls := func(m map[string]*tally) []string {
		var ids []string
		for id, t := range m {
			if t.full() {
				ids = append(ids, id)
			}
		}
		slices.Sort(ids)
		return ids
	}
	return fulls(a.sessions), fulls(a.routes)
}

// refusedRecord notes, for /readyz, that the store refused a record of
// route even as a truncated dead letter, or refused its outcome.
func (a *admission) refusedRecord(route string, err error) {
	a.mu.Lock()
	a.refused[route] = err.Error()
	a.mu.Unlock()
}

// refusals maps the routes with a refused record to why.
func (a *admission) refusals() map[string]string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return maps.Clone(a.refused)
}
