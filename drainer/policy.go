package drainer

import (
	"math"
	"math/rand/v2"
	"time"

	"github.com/gobridge/gobridge/routes"
	"github.com/gobridge/gobridge/stores"
)

// Poisoned reports whether a record that just failed transiently must be
// taken out of the retry loop (DESIGN.md §1.4). All of these must hold:
//
//   - it has been claimed more than p.MaxReplayAttempts times (rec.Attempts,
//     counted by the store at each claim);
//   - it has a recorded first attempt (rec.FirstAttemptAt), or, for a record
//     without one, a creation time (rec.CreatedAt);
//   - p.ReplayBudget has passed since that time: now - since >= budget.
//
// A transient outage shorter than the budget therefore never poisons a
// record, however many attempts it took. Poisoned is only consulted for
// transient failures: a capacity error never poisons (see README "delivery").
func Poisoned(rec stores.Record, p routes.Policy, now time.Time) bool {
	if rec.Attempts <= p.MaxReplayAttempts {
		return false
	}
	since := rec.FirstAttemptAt
	if since.IsZero() {
		since = rec.CreatedAt
	}
	if since.IsZero() {
		return false
	}
	return now.Sub(since) >= p.ReplayBudget.D()
}

// BackoffCeiling is the upper bound of the retry delay after attempt
// (1-based) failed: initial × multiplier^(attempt−1), capped at max_interval.
func BackoffCeiling(attempt int, b routes.Backoff) time.Duration {
	initial, maxI, mult := b.InitialInterval.D(), b.MaxInterval.D(), b.Multiplier
	if initial <= 0 {
		initial = time.Second
	}
	if maxI <= 0 {
		maxI = 30 * time.Second
	}
	if mult < 1 {
		mult = 2
	}
	if attempt < 1 {
		attempt = 1
	}
	d := float64(initial) * math.Pow(mult, float64(attempt-1))
	if math.IsInf(d, 0) || math.IsNaN(d) || d >= float64(maxI) {
		return maxI
	}
	return time.Duration(d)
}

// NextRetry is when a record whose attempt (1-based) failed is due again:
// now plus a delay drawn uniformly from [0, BackoffCeiling] (full jitter).
// A capacity error's retryAfter wins when it is longer than the drawn delay.
// r supplies the jitter; nil uses the global source.
func NextRetry(now time.Time, attempt int, b routes.Backoff, retryAfter time.Duration, r *rand.Rand) time.Time {
	ceil := BackoffCeiling(attempt, b)
	var d time.Duration
	if ceil > 0 {
		if r != nil {
			d = time.Duration(r.Int64N(int64(ceil) + 1))
		} else {
			d = time.Duration(rand.Int64N(int64(ceil) + 1))
		}
	}
	return now.Add(max(d, retryAfter))
}

// nextLimit is the AIMD step of a route's concurrency limit after one send:
// +1 when it succeeded (up to ceiling), halved on a capacity error (floor 1),
// unchanged otherwise (transient failures are not a congestion signal).
func nextLimit(limit, ceiling int, succeeded, capacity bool) int {
	switch {
	case capacity:
		limit /= 2
	case succeeded:
		limit++
	}
	return min(max(limit, 1), max(ceiling, 1))
}

// initialLimit is where a route's AIMD limit starts: min(10, max_in_flight).
func initialLimit(ceiling int) int { return min(10, max(ceiling, 1)) }

// waker computes how long an idle partition loop waits before it claims
// again. The loop also wakes at once on Group.Wake and loops without waiting
// when a claim returned a full batch.
type waker struct {
	s   routes.DrainStrategy
	cur time.Duration
}

func newWaker(s routes.DrainStrategy) *waker {
	return &waker{s: s, cur: s.MinInterval.D()}
}

// next returns the wait after a claim that found records (found) or none,
// with ±10% jitter drawn from r (nil: global source).
func (w *waker) next(found bool, r *rand.Rand) time.Duration {
	var d time.Duration
	if w.s.Type == routes.DrainAdaptiveBackoff {
		if found {
			w.cur = w.s.MinInterval.D()
		} else {
			next := time.Duration(float64(w.cur) * w.s.Multiplier)
			if next <= w.cur { // multiplier <= 1 or a zero start
				next = w.cur + 1
			}
			w.cur = min(next, w.s.MaxInterval.D())
		}
		d = w.cur
	} else {
		d = w.s.Interval.D()
	}
	return jitter(d, r)
}

// jitter spreads d by ±10% so that instances polling one store drift apart.
func jitter(d time.Duration, r *rand.Rand) time.Duration {
	spread := int64(d) / 10
	if spread <= 0 {
		return d
	}
	var n int64
	if r != nil {
		n = r.Int64N(2*spread + 1)
	} else {
		n = rand.Int64N(2*spread + 1)
	}
	return d - time.Duration(spread) + time.Duration(n)
}

// strategyDefaults fills the zero fields of a strategy with the DESIGN.md
// defaults (fixed_poll every 1s; adaptive 100ms..30s ×2).
func strategyDefaults(s routes.DrainStrategy) routes.DrainStrategy {
	if s.Type == "" {
		s.Type = routes.DrainFixedPoll
	}
	if s.Interval <= 0 {
		s.Interval = routes.Duration(time.Second)
	}
	if s.MinInterval <= 0 {
		s.MinInterval = routes.Duration(100 * time.Millisecond)
	}
	if s.MaxInterval <= 0 {
		s.MaxInterval = routes.Duration(30 * time.Second)
	}
	if s.MaxInterval < s.MinInterval {
		s.MaxInterval = s.MinInterval
	}
	if s.Multiplier <= 1 {
		s.Multiplier = 2
	}
	return s
}

// policyDefaults fills zero fields that have no meaningful zero value.
// MaxReplayAttempts, ReplayBudget and TTL are used as given (0 is valid).
func policyDefaults(p routes.Policy) routes.Policy {
	if p.MaxInFlight <= 0 {
		p.MaxInFlight = 100
	}
	if p.SendTimeout <= 0 {
		p.SendTimeout = routes.Duration(30 * time.Second)
	}
	if p.OnExpired == "" {
		p.OnExpired = routes.PolicyDLQ
	}
	if p.OnPermanentFailure == "" {
		p.OnPermanentFailure = routes.PolicyDLQ
	}
	if p.Backoff.InitialInterval <= 0 {
		p.Backoff.InitialInterval = routes.Duration(time.Second)
	}
	if p.Backoff.MaxInterval <= 0 {
		p.Backoff.MaxInterval = routes.Duration(30 * time.Second)
	}
	if p.Backoff.Multiplier < 1 {
		p.Backoff.Multiplier = 2
	}
	return p
}
