package drainer

import "sync"

// limiter is one route's AIMD concurrency limit, shared by all partition
// loops of a Group. Slots are taken with tryAcquire; a caller that finds no
// free slot waits on the group's notifier, which fires on every release and
// limit change. (A buffered-channel semaphore cannot change its capacity,
// which AIMD needs; nothing here polls or sleeps.)
type limiter struct {
	route   string
	ceiling int
	obs     Observer
	note    *notifier

	mu       sync.Mutex
	limit    int
	inFlight int
}

func newLimiter(route string, ceiling int, obs Observer, note *notifier) *limiter {
	l := &limiter{route: route, ceiling: ceiling, obs: obs, note: note, limit: min(10, max(ceiling, 1))}
	obs.Limit(route, l.limit)
	return l
}

// tryAcquire takes a slot if fewer than limit sends are in flight.
func (l *limiter) tryAcquire() bool {
	l.mu.Lock()
	ok := l.inFlight < l.limit
	if ok {
		l.inFlight++
	}
	n := l.inFlight
	l.mu.Unlock()
	if ok {
		l.obs.InFlight(l.route, n)
	}
	return ok
}

// release frees a slot taken by tryAcquire.
func (l *limiter) release() {
	l.mu.Lock()
	l.inFlight--
	n := l.inFlight
	l.mu.Unlock()
	l.obs.InFlight(l.route, n)
	l.note.notify()
}

// record applies the AIMD step for one finished send.
func (l *limiter) record(succeeded, capacity bool) {
	l.mu.Lock()
	old := l.limit
	l.limit = nextLimit(l.limit, l.ceiling, succeeded, capacity)
	n := l.limit
	l.mu.Unlock()
	if n != old {
		l.obs.Limit(l.route, n)
		l.note.notify()
	}
}

// notifier is a broadcast: wait returns a channel closed by the next notify.
type notifier struct {
	mu sync.Mutex
	ch chan struct{}
}

func newNotifier() *notifier { return &notifier{ch: make(chan struct{})} }

func (n *notifier) wait() <-chan struct{} {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.ch
}

func (n *notifier) notify() {
	n.mu.Lock()
	close(n.ch)
	n.ch = make(chan struct{})
	n.mu.Unlock()
}
