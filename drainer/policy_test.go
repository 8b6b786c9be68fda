package drainer

import (
	"math/rand/v2"
	"testing"
	"time"
)

func TestPoisoned(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	pol := Policy{MaxReplayAttempts: 5, ReplayBudget: 15 * time.Minute}
	tests := []struct {
		name     string
		attempts int
		first    time.Time
		now      time.Time
		want     bool
	}{
		{"attempts and budget both exceeded", 6, t0, t0.Add(15 * time.Minute), true},
		{"budget passed long ago", 9, t0, t0.Add(time.Hour), true},
		{"attempts at the floor are not enough", 5, t0, t0.Add(time.Hour), false},
		{"many attempts inside the budget", 1000, t0, t0.Add(15*time.Minute - time.Nanosecond), false},
		{"budget counts from the first attempt", 6, t0.Add(10 * time.Minute), t0.Add(20 * time.Minute), false},
		{"no first attempt never poisons", 6, time.Time{}, t0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			delivered := func(time.Time) bool { return true }
			if got := Poisoned(tt.attempts, tt.first, pol, tt.now, delivered); got != tt.want {
				t.Errorf("Poisoned = %v, want %v", got, tt.want)
			}
			if Poisoned(tt.attempts, tt.first, pol, tt.now, func(time.Time) bool { return false }) {
				t.Error("poisoned while the target delivered nothing since the first attempt")
			}
		})
	}
}

func TestBackoff_Ceiling(t *testing.T) {
	t.Parallel()
	b := Backoff{Initial: time.Second, Max: 30 * time.Second, Multiplier: 2}
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second, 30 * time.Second, 30 * time.Second}
	for i, w := range want {
		if got := b.Ceiling(i + 1); got != w {
			t.Errorf("attempt %d: ceiling %v, want %v", i+1, got, w)
		}
	}
	if got := b.Ceiling(10_000); got != 30*time.Second {
		t.Errorf("huge attempt: ceiling %v, want the cap", got)
	}
	if got := b.Ceiling(0); got != time.Second {
		t.Errorf("attempt 0: ceiling %v, want initial", got)
	}
}

func TestBackoff_NextFullJitterWithinCeiling(t *testing.T) {
	t.Parallel()
	b := Backoff{Initial: time.Second, Max: 30 * time.Second, Multiplier: 2}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	r := rand.New(rand.NewPCG(1, 2))
	var low, high bool
	for range 2000 {
		d := b.Next(now, 3, 0, r).Sub(now)
		if d < 0 || d > 4*time.Second {
			t.Fatalf("delay %v outside [0, 4s]", d)
		}
		low = low || d < time.Second
		high = high || d > 3*time.Second
	}
	if !low || !high {
		t.Errorf("jitter does not spread over [0, ceiling]: low %v high %v", low, high)
	}
}

func TestBackoff_NextLongerRetryAfterWinsUpToMax(t *testing.T) {
	t.Parallel()
	b := Backoff{Initial: time.Second, Max: 2 * time.Minute, Multiplier: 2}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	r := rand.New(rand.NewPCG(3, 4))
	for range 100 {
		if d := b.Next(now, 1, time.Minute, r).Sub(now); d != time.Minute {
			t.Fatalf("delay %v, want the 1m retry-after", d)
		}
		if d := b.Next(now, 1, 24*time.Hour, r).Sub(now); d != 2*time.Minute {
			t.Fatalf("delay %v for a 24h retry-after, want max_interval (2m)", d)
		}
		if d := b.Next(now, 5, time.Millisecond, r).Sub(now); d < time.Millisecond || d > 16*time.Second {
			t.Fatalf("delay %v, want backoff no shorter than the hint", d)
		}
	}
}

func TestNextLimit(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name                 string
		limit, ceiling, want int
		ok, capacity         bool
	}{
		{"success adds one", 10, 100, 11, true, false},
		{"success stops at the ceiling", 100, 100, 100, true, false},
		{"capacity halves", 10, 100, 5, false, true},
		{"capacity floors at one", 1, 100, 1, false, true},
		{"capacity wins over success", 8, 100, 4, true, true},
		{"transient leaves it", 7, 100, 7, false, false},
		{"ceiling below the limit clamps", 10, 3, 3, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := nextLimit(tt.limit, tt.ceiling, tt.ok, tt.capacity); got != tt.want {
				t.Errorf("nextLimit = %d, want %d", got, tt.want)
			}
		})
	}
}

func TestWaker_AdaptiveBackoff(t *testing.T) {
	t.Parallel()
	w := &waker{p: Poll{Min: 100 * time.Millisecond, Max: time.Second, Multiplier: 2}}
	w.next(true, rand.New(rand.NewPCG(1, 1)))
	r := rand.New(rand.NewPCG(5, 6))
	within := func(got, want time.Duration) bool { return got >= want-want/10 && got <= want+want/10 }
	for _, want := range []time.Duration{200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond, time.Second, time.Second} {
		if got := w.next(false, r); !within(got, want) {
			t.Fatalf("idle wait %v, want %v ±10%%", got, want)
		}
	}
	if got := w.next(true, r); !within(got, 100*time.Millisecond) {
		t.Fatalf("wait after records found %v, want min interval", got)
	}
}

func TestWaker_FixedPoll(t *testing.T) {
	t.Parallel()
	w := &waker{p: Poll{Min: 2 * time.Second, Max: 2 * time.Second}}
	r := rand.New(rand.NewPCG(7, 8))
	for _, found := range []bool{false, true, false} {
		if got := w.next(found, r); got < 1800*time.Millisecond || got > 2200*time.Millisecond {
			t.Fatalf("fixed wait %v, want 2s ±10%%", got)
		}
	}
}

func TestFairShare(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ parts, members, want int }{{4, 1, 4}, {4, 2, 2}, {5, 2, 3}, {1, 3, 1}, {4, 0, 4}} {
		if got := fairShare(c.parts, c.members); got != c.want {
			t.Errorf("fairShare(%d, %d) = %d, want %d", c.parts, c.members, got, c.want)
		}
	}
}
