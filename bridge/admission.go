package bridge

import (
	"cmp"
	"context"
	"maps"
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
// the receivers stop acknowledging and the broker's flow control pushes
// back. Counts are the store's (Stats, re-read every second and while
// someone waits) plus what this process wrote since, plus what it admitted
// and has not written yet.
type admission struct {
	read func(ctx context.Context) ([]stores.SessionStats, error)

	// io orders a refresh's read of the store with the writer's writes:
	// the writer holds it from a Write until its effects are counted, so a
	// read never sees a write that the counts do not show yet (or the
	// reverse). Taken before mu.
	io sync.Mutex

	mu       sync.Mutex
	sessions map[string]*sessionCount
	routes   map[string]*routeCount
	changed  chan struct{} // closed and replaced on every change
	lastRead time.Time
	refused  map[string]string // route -> why its last record could not be stored at all
}

type sessionCount struct {
	maxLive  int
	maxBytes int64
	live     int
	bytes    int64
	// unwritten counts the records admitted and not written yet: a
	// refresh adds them to the store's counts.
	unwritten      int
	unwrittenBytes int64
}

type routeCount struct {
	maxDead   int
	dead      int
	unwritten int
}

func newAdmission(read func(ctx context.Context) ([]stores.SessionStats, error)) *admission {
	return &admission{read: read, sessions: map[string]*sessionCount{}, routes: map[string]*routeCount{},
		changed: make(chan struct{}), refused: map[string]string{}}
}

// configure sets the limits of p's sessions and routes, keeping their
// counts, and forgets the sessions and routes p does not have.
func (a *admission) configure(p *parts) {
	a.mu.Lock()
	defer a.mu.Unlock()
	sessions, routes := map[string]*sessionCount{}, map[string]*routeCount{}
	for id, s := range p.sessions {
		sessions[id] = cmp.Or(a.sessions[id], &sessionCount{})
		sessions[id].maxLive, sessions[id].maxBytes = s.maxLive, s.maxBytes
	}
	for _, r := range p.routes {
		routes[r.id] = cmp.Or(a.routes[r.id], &routeCount{})
		routes[r.id].maxDead = r.cfg.Policy.MaxDeadLetters
	}
	a.sessions, a.routes = sessions, routes
	maps.DeleteFunc(a.refused, func(id string, _ string) bool { return routes[id] == nil })
	a.notify()
}

// admit waits until rec fits: a live record under its session's limits, a
// dead letter under its route's max_dead_letters. It reserves the room and
// reports false, reserving nothing, when ctx ended first.
func (a *admission) admit(ctx context.Context, rec *stores.Record) bool {
	for {
		a.mu.Lock()
		ok := a.fits(rec)
		if ok {
			a.count(rec, 1)
			a.unwritten(rec, 1)
		}
		ch, stale := a.changed, time.Since(a.lastRead) >= refreshWhileBlocked
		a.mu.Unlock()
		if ok {
			return true
		}
		if stale {
			a.refresh(ctx, false)
			continue
		}
		t := time.NewTimer(refreshWhileBlocked)
		select {
		case <-ch:
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return false
		}
		t.Stop()
	}
}

func (a *admission) fits(rec *stores.Record) bool {
	if rec.State == stores.Dead {
		r := a.routes[rec.Route]
		return r == nil || r.dead < r.maxDead
	}
	s := a.sessions[rec.Session]
	return s == nil || (s.live < s.maxLive && s.bytes < s.maxBytes)
}

// count adds n records like rec to the counts (n < 0 takes them away).
func (a *admission) count(rec *stores.Record, n int) {
	if rec.State == stores.Dead {
		if r := a.routes[rec.Route]; r != nil {
			r.dead += n
		}
	} else if s := a.sessions[rec.Session]; s != nil {
		s.live += n
		s.bytes += int64(n) * rec.Size()
	}
	a.notify()
}

// unwritten adds n to the records like rec admitted and not written yet.
func (a *admission) unwritten(rec *stores.Record, n int) {
	if rec.State == stores.Dead {
		if r := a.routes[rec.Route]; r != nil {
			r.unwritten += n
		}
	} else if s := a.sessions[rec.Session]; s != nil {
		s.unwritten += n
		s.unwrittenBytes += int64(n) * rec.Size()
	}
}

// written notes that the store has answered for an admitted record (it is
// in the store's counts now, or refused and released). The writer calls
// it holding io.
func (a *admission) written(rec *stores.Record) {
	a.mu.Lock()
	a.unwritten(rec, -1)
	a.mu.Unlock()
}

// add counts a record stored without admit (a truncated dead letter that
// replaced a record the store refused).
func (a *admission) add(rec *stores.Record) {
	a.mu.Lock()
	a.count(rec, 1)
	a.mu.Unlock()
}

// release gives back the room of a record admitted but not stored (a
// duplicate, absorbed, refused, or ingest gave up on it).
func (a *admission) release(rec *stores.Record) {
	a.mu.Lock()
	a.count(rec, -1)
	a.mu.Unlock()
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
			if c := a.sessions[s.Session]; c != nil {
				c.live--
			}
			if r := a.routes[s.Route]; r != nil && s.Outcome == stores.DeadLetter {
				r.dead++
			}
		case stores.Drop:
			if r := a.routes[s.Route]; r != nil {
				r.dead--
			}
		}
	}
	a.notify()
}

// refresh re-reads the store's counts and adds what is admitted and not
// written yet. It waits while the writer is writing; with try, it skips
// the read then instead (the writer may retry a failing store for long:
// the monitor must not stall), and the next one will do.
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
	for _, c := range a.sessions {
		c.live, c.bytes = c.unwritten, c.unwrittenBytes
	}
	for _, r := range a.routes {
		r.dead = r.unwritten
	}
	for _, st := range stats {
		if c := a.sessions[st.Session]; c != nil {
			c.live += st.Live
			c.bytes += st.Bytes
		}
		for route, rc := range st.Routes {
			if r := a.routes[route]; r != nil {
				r.dead += rc.Dead
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

// live is the count of session's live records as admission sees it.
func (a *admission) live(session string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	if c := a.sessions[session]; c != nil {
		return c.live
	}
	return 0
}

// deadFull reports whether route holds max_dead_letters.
func (a *admission) deadFull(route string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	r := a.routes[route]
	return r != nil && r.dead >= r.maxDead
}

// full lists the sessions and routes at a limit now, for /readyz.
func (a *admission) full() (sessions, routes []string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for id, c := range a.sessions {
		if c.live >= c.maxLive || c.bytes >= c.maxBytes {
			sessions = append(sessions, id)
		}
	}
	for id, r := range a.routes {
		if r.dead >= r.maxDead {
			routes = append(routes, id)
		}
	}
	return sessions, routes
}

// refusedRecord notes that route has a record the store refused even as a
// truncated dead letter (left unacknowledged), for /readyz.
func (a *admission) refusedRecord(route string, err error) {
	a.mu.Lock()
	a.refused[route] = err.Error()
	a.mu.Unlock()
}

// refusals returns the routes with a refused record and why.
func (a *admission) refusals() map[string]string {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make(map[string]string, len(a.refused))
	for k, v := range a.refused {
		out[k] = v
	}
	return out
}
