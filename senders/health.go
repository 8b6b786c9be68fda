package senders

import (
	"errors"
	"sync"
	"time"
)

// DownAfter is how many consecutive non-permanent failures, on distinct
// messages, mark a sender down (DESIGN.md §11.3).
const DownAfter = 3

// Health tells a target that is down from messages that fail: a sender is
// down after DownAfter consecutive transient or capacity failures on
// distinct messages, and up again after one success. While it is down,
// callers send one probe per backoff step instead of one request per
// message (Probe). It is shared by every route that uses the sender, in
// every delivery mode, and safe for concurrent use.
type Health struct {
	// OnChange, when set, is called (outside the lock) on every transition
	// with the new state and the last error. Calls come one at a time, and
	// the last one says the current state even when transitions race.
	OnChange func(up bool, lastErr string)

	// report is held while OnChange runs (a channel, so that a caller
	// waiting for it is blocked durably under testing/synctest);
	// reportedDown is the state OnChange last got.
	report       chan struct{}
	reportedDown bool

	mu        sync.Mutex
	down      bool
	streak    map[string]bool // messages that failed since the last success
	lastOK    time.Time
	lastErr   string
	probeAt   time.Time     // while down: when the next probe may go
	probeWait time.Duration // the backoff step probeAt was set with
	probing   bool
	probeStep int
}

// NewHealth returns the health of a sender that is up.
func NewHealth() *Health { return &Health{streak: map[string]bool{}, report: make(chan struct{}, 1)} }

// Up reports whether the sender is up.
func (h *Health) Up() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return !h.down
}

// LastError is the error of the last failed send ("" when none failed since
// the process started).
func (h *Health) LastError() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.lastErr
}

// DeliveredSince reports whether the sender accepted a message after t. The
// poison rule needs it: a record is poisoned only if its target delivered
// something else since the record's first attempt.
func (h *Health) DeliveredSince(t time.Time) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.lastOK.After(t)
}

// Record notes the result of one send of message id, classified by
// Classify. A permanent failure, or a message held unsent (ErrHeld), says
// nothing about the target: it only ends a probe, so that another message
// probes at once. backoff gives the wait
// before the n-th probe (1-based) while down.
func (h *Health) Record(id string, err error, now time.Time, backoff func(n int) time.Duration) {
	class, _ := Classify(err)
	h.mu.Lock()
	if class == Fatal || errors.Is(err, ErrHeld) {
		h.probing = false
		h.mu.Unlock()
		return
	}
	changed := false
	if class == OK {
		h.lastOK = now
		clear(h.streak)
		h.probing = false
		if h.down {
			h.down, changed = false, true
		}
	} else {
		h.lastErr = err.Error()
		h.streak[id] = true
		if h.probing {
			h.probing = false
			h.probeStep++
			h.probeWait = backoff(h.probeStep)
			h.probeAt = now.Add(h.probeWait)
		}
		if !h.down && len(h.streak) >= DownAfter {
			h.down, changed = true, true
			h.probeStep = 1
			h.probeWait = backoff(1)
			h.probeAt = now.Add(h.probeWait)
		}
	}
	h.mu.Unlock()
	if changed && h.OnChange != nil {
		h.reportChange()
	}
}

// reportChange calls OnChange with the state as it is when its turn comes,
// unless that is the state last reported: a transition that raced another
// one (a down report still running when a success brings the sender up)
// cannot leave the reported state stale.
func (h *Health) reportChange() {
	h.report <- struct{}{}
	defer func() { <-h.report }()
	h.mu.Lock()
	up, last := !h.down, h.lastErr
	h.mu.Unlock()
	if up == !h.reportedDown {
		return
	}
	h.reportedDown = !up
	h.OnChange(up, last)
}

// Probe reports whether a send may go now: always while the sender is up;
// while it is down, one probe at a time, once its backoff step has passed
// (at most one step from now: a wall clock stepped back does not hold the
// probe for the length of the step). When it returns false, wait is how
// long until the next probe may go (zero while a probe is in flight). A
// caller that got true while down must Record the probe's result.
func (h *Health) Probe(now time.Time) (ok bool, wait time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.probeAt.Sub(now) > h.probeWait {
		h.probeAt = now.Add(h.probeWait)
	}
	switch {
	case !h.down:
		return true, 0
	case h.probing:
		return false, 0
	case now.Before(h.probeAt):
		return false, h.probeAt.Sub(now)
	}
	h.probing = true
	return true, 0
}
