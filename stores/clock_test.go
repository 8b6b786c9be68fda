package stores_test

import (
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gobridge/gobridge/stores"
)

// stepped is a wall clock without a monotonic reading that a test steps.
type stepped struct{ off atomic.Int64 }

func (c *stepped) now() time.Time       { return time.Now().Round(0).Add(time.Duration(c.off.Load())) }
func (c *stepped) step(d time.Duration) { c.off.Add(int64(d)) }

func TestClock_RebasesTimesWrittenBeforeAStep(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		wall := &stepped{}
		c := stores.NewClock(wall.now)
		boot := c.Now()
		time.Sleep(time.Minute)
		written := c.Now() // a minute after boot
		time.Sleep(time.Minute)
		if got := c.Rebase(written, written); !got.Equal(written) {
			t.Fatalf("no step: Rebase = %v, want %v", got, written)
		}
		const years = 50 * 365 * 24 * time.Hour
		wall.step(years)
		time.Sleep(time.Second)
		now := c.Now()
		if c.Steps() != 1 {
			t.Fatalf("Steps = %d after a step, want 1", c.Steps())
		}
		if age := now.Sub(c.Rebase(written, written)); age != time.Minute+time.Second {
			t.Errorf("forward: age of a time written before the step = %v, want 1m1s", age)
		}
		if got := c.Rebase(boot.Add(-time.Hour), boot.Add(-time.Hour)); !got.Equal(boot.Add(-time.Hour)) {
			t.Errorf("a time from before the process was rebased to %v", got)
		}
		if got := c.Rebase(now, now); !got.Equal(now) {
			t.Errorf("a time of the current era was rebased to %v", got)
		}
		time.Sleep(time.Minute)
		wall.step(-years - time.Hour) // back, past where it was
		time.Sleep(time.Second)
		now = c.Now()
		if age := now.Sub(c.Rebase(written, written)); age != 2*time.Minute+2*time.Second {
			t.Errorf("after two steps: age = %v, want 2m2s", age)
		}
		drift := c.Now()
		wall.step(stores.StepTolerance / 2) // a slew, not a step
		c.Now()
		if c.Steps() != 2 || !c.Rebase(drift, drift).Equal(drift) {
			t.Errorf("a correction within StepTolerance was taken for a step")
		}
	})
}
