package bridge

import (
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gobridge/gobridge/stores"
)

// steppedWall is a wall clock that a test steps (NTP, an operator); its
// readings carry no monotonic reading, as stored ones do not.
type steppedWall struct{ off atomic.Int64 }

func (c *steppedWall) now() time.Time       { return time.Now().Round(0).Add(time.Duration(c.off.Load())) }
func (c *steppedWall) step(d time.Duration) { c.off.Add(int64(d)) }

const fiftySixYears = 56 * 365 * 24 * time.Hour

// A record persisted at boot (1970) is a minute old after NTP stepped the
// clock 56 years forward: /readyz does not call its session stalled and
// oldest_age_seconds says a minute. Stepped back instead, a record that
// really waits longer than stall_after is reported stalled, not hidden for
// 56 years.
func TestReadiness_OldestAgeAcrossClockSteps(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		wall := &steppedWall{}
		wall.off.Store(int64(time.Until(time.Unix(30, 0))))
		b := &Bridge{clock: stores.NewClock(wall.now)}
		s := &session{id: "s1", sessionSettings: sessionSettings{stallAfter: 10 * time.Minute}}
		st := stores.SessionStats{Session: "s1", Live: 1, Oldest: b.clock.Now()}
		time.Sleep(time.Minute)
		wall.step(fiftySixYears)
		time.Sleep(time.Second)
		now := b.clock.Now()
		if reason := b.stalled(s, st, now); reason != "" {
			t.Errorf("forward step: %s", reason)
		}
		if age := b.oldestAge(st, now); age != time.Minute+time.Second {
			t.Errorf("forward step: oldest age %v, want 1m1s", age)
		}

		st.Oldest = b.clock.Now() // a record persisted after the step, 2026
		time.Sleep(time.Minute)
		wall.step(-fiftySixYears)
		time.Sleep(10 * time.Minute)
		now = b.clock.Now()
		if reason := b.stalled(s, st, now); !strings.Contains(reason, "stalled: oldest pending record is 11m0s old") {
			t.Errorf("backward step: stalled = %q, want 11m0s old", reason)
		}
	})
}
