package drainer

import (
	"math"
	"math/rand/v2"
	"time"
)

// Policy is a route's delivery policy, as routes.Load resolved it (every
// field holds its effective value).
type Policy struct {
	// MaxInFlight is the ceiling of the route's AIMD concurrency limit.
	MaxInFlight int
	// SendTimeout bounds one send.
	SendTimeout time.Duration
	// MaxReplayAttempts and ReplayBudget are the poison rule (Poisoned).
	MaxReplayAttempts int
	ReplayBudget      time.Duration
	// DropExpired settles expired records as done instead of dead letters.
	DropExpired bool
	// DropPermanent settles permanent failures as done instead of dead
	// letters.
	DropPermanent bool
	Backoff       Backoff
}

// Backoff is exponential backoff with full jitter.
type Backoff struct {
	Initial    time.Duration
	Max        time.Duration
	Multiplier float64
}

// Ceiling is the upper bound of the delay before the n-th retry (1-based):
// Initial × Multiplier^(n−1), capped at Max.
func (b Backoff) Ceiling(n int) time.Duration {
	n = max(n, 1)
	d := float64(b.Initial) * math.Pow(max(b.Multiplier, 1), float64(n-1))
	if math.IsInf(d, 0) || math.IsNaN(d) || d >= float64(b.Max) {
		return b.Max
	}
	return time.Duration(d)
}

// Next is when a record whose n-th attempt failed is due again: now plus a
// delay drawn uniformly from [0, Ceiling(n)] (full jitter); a capacity
// error's retryAfter wins when it is longer, up to Max: max_interval is the
// operator's ceiling, and a target (a load balancer answering 503 with
// Retry-After: 86400) must not park records for a day after it recovers.
// r supplies the jitter.
func (b Backoff) Next(now time.Time, n int, retryAfter time.Duration, r *rand.Rand) time.Time {
	ceil := b.Ceiling(n)
	var d time.Duration
	if ceil > 0 {
		d = time.Duration(r.Int64N(int64(ceil) + 1))
	}
	return now.Add(max(d, min(retryAfter, b.Max)))
}

// Poisoned reports whether a record that just failed transiently is taken
// out of the retry loop (DESIGN.md §1.4 and §11.3). All of these must hold:
//
//   - it has been sent more than p.MaxReplayAttempts times (attempts);
//   - p.ReplayBudget has passed since its first attempt (since; zero
//     never poisons);
//   - its target delivered another record since that first attempt
//     (deliveredSince), so the fault is the record's, not the target's: a
//     target that is down for a weekend dead-letters nothing.
func Poisoned(attempts int, since time.Time, p Policy, now time.Time, deliveredSince func(time.Time) bool) bool {
	return attempts > p.MaxReplayAttempts && !since.IsZero() && now.Sub(since) >= p.ReplayBudget && deliveredSince(since)
}

// nextLimit is the AIMD step of a route's concurrency limit after one send:
// +1 when it succeeded (up to ceiling), halved on a capacity error (floor
// 1), unchanged otherwise (transient failures are not a congestion signal).
func nextLimit(limit, ceiling int, succeeded, capacity bool) int {
	switch {
	case capacity:
		limit /= 2
	case succeeded:
		limit++
	}
	return min(max(limit, 1), max(ceiling, 1))
}

// Poll says how often a partition that holds nothing due looks in the
// store for records it does not hold (appended by other instances,
// requeued): every Min, or from Min growing by Multiplier up to Max while
// nothing is found (adaptive, Multiplier > 1).
type Poll struct {
	Min, Max   time.Duration
	Multiplier float64
}

// waker tracks a partition's poll interval.
type waker struct {
	p   Poll
	cur time.Duration
}

// next returns the wait after a claim that found records (found) or none,
// with ±10% jitter drawn from r.
func (w *waker) next(found bool, r *rand.Rand) time.Duration {
	if found || w.cur == 0 {
		w.cur = w.p.Min
	} else if w.p.Multiplier > 1 {
		w.cur = min(max(time.Duration(float64(w.cur)*w.p.Multiplier), w.cur+1), w.p.Max)
	}
	return jitter(w.cur, r)
}

// jitter spreads d by ±10% so that instances polling one store drift apart.
func jitter(d time.Duration, r *rand.Rand) time.Duration {
	spread := int64(d) / 10
	if spread <= 0 {
		return d
	}
	return d - time.Duration(spread) + time.Duration(r.Int64N(2*spread+1))
}
