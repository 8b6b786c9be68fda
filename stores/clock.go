package stores

import (
	"sync"
	"time"
)

// StepTolerance is how far the wall clock may move against the monotonic
// clock between two readings of a Clock before the Clock takes it for a
// step. NTP slews smaller corrections (at most 500 ppm: 1.8 s an hour).
const StepTolerance = 5 * time.Second

// Clock reads the wall clock and notices when it is stepped (NTP setting the
// time of a box that booted without a real-time clock, an operator), by
// comparing it with the process's monotonic clock. Everything a store holds
// is wall-clock time; Rebase maps a time written by this process before a
// step into the wall clock as it is now, so that a record received at boot
// and sent two minutes later, after NTP stepped the clock fifty years
// forward, is two minutes old. Times written before the process started
// cannot be mapped: callers bound them (a due time at most max_interval
// ahead, an age never negative). A Clock is safe for concurrent use.
type Clock struct {
	wall func() time.Time

	mu      sync.Mutex
	started bool
	mono    time.Time     // the runtime clock at the first reading
	wall0   time.Time     // the wall clock then (no monotonic reading)
	off     time.Duration // wall elapsed − monotonic elapsed in the current era
	from    time.Time     // the wall clock when the current era began
	last    time.Time     // the wall clock at the last reading
	eras    []era         // earlier eras, oldest first
}

// era is a stretch of time between two steps: times written in it lie in
// [from, to] and are shift behind the clock as it is now.
type era struct {
	from, to time.Time
	shift    time.Duration
}

// NewClock returns a Clock over wall (nil: time.Now). Its monotonic reference
// is the runtime's clock (which testing/synctest fakes).
func NewClock(wall func() time.Time) *Clock {
	if wall == nil {
		wall = time.Now
	}
	return &Clock{wall: wall}
}

// Now reads the wall clock, noting a step since the last reading. It
// returns what wall returned (with its monotonic reading, if any).
func (c *Clock) Now() time.Time {
	t := c.wall()
	w, m := t.Round(0), time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.started {
		c.started, c.mono, c.wall0, c.from, c.last = true, m, w, w, w
		return t
	}
	off := w.Sub(c.wall0) - m.Sub(c.mono)
	if step := off - c.off; step > StepTolerance || step < -StepTolerance {
		c.eras = append(c.eras, era{from: c.from, to: w.Add(-step)})
		for i := range c.eras {
			c.eras[i].shift += step
		}
		c.from = w
	}
	c.off, c.last = off, w
	return t
}

// Steps reports how many steps the Clock has seen; it changes when one is
// seen.
func (c *Clock) Steps() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.eras)
}

// Rebase maps t, a time computed from written (a wall-clock reading of
// this process, e.g. an expiry from a receive time), into the wall clock as
// it is now: shifted by every step since written, when written falls in an
// earlier era of this process and not in the current one. Other times are
// returned as they are. The result carries no monotonic reading.
//
// After a backward step the eras overlap: a time that lies in the current
// era (since the step, up to now) is taken as written in it, so a time
// written shortly before the step may look younger than it is, by at most
// the step.
func (c *Clock) Rebase(t, written time.Time) time.Time {
	if t.IsZero() {
		return t
	}
	c.Now() // notice a step that written may predate
	t, written = t.Round(0), written.Round(0)
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.eras) == 0 || !written.Before(c.from) && !written.After(c.last) { // no step, or written in the current era
		return t
	}
	for i := len(c.eras) - 1; i >= 0; i-- {
		if e := c.eras[i]; !written.Before(e.from) && !written.After(e.to) {
			return t.Add(e.shift)
		}
	}
	return t
}
