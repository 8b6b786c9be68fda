package stores

import (
	"context"
	"time"
)

// Inspector is implemented by stores that can report a per-route breakdown
// for operators (`gobridge outbox stats`, the admin API). It is optional: a
// backend without it still satisfies Store, and callers type-assert.
type Inspector interface {
	// Inspect returns one RouteStats per (Session, Route) that has live,
	// dead or recently done records, sorted by Session then Route. Due
	// counts pending records whose NextAttemptAt is at or before now;
	// DoneLastHour counts records completed (delivered, or dropped by the
	// drainer) in the hour before now, by the store's own clock at the time
	// of completion. It reads every live and dead record's row (or an
	// index entry of it): it is meant for operators, not hot paths.
	Inspect(ctx context.Context, now time.Time) ([]RouteStats, error)
}

// RouteStats is the operator view of one route's records in one session.
type RouteStats struct {
	Session string `json:"session"`
	Route   string `json:"route"`
	// Pending counts records waiting to be claimed (due or not).
	Pending int `json:"pending"`
	// Claimed counts records held by a drainer (including lapsed claims).
	Claimed int `json:"claimed"`
	// Due counts pending records due at or before now.
	Due int `json:"due"`
	// OldestPendingAt is the CreatedAt of the oldest pending or claimed
	// record; zero when there is none.
	OldestPendingAt time.Time `json:"oldest_pending_at,omitzero"`
	// Dead counts dead letters.
	Dead int `json:"dead"`
	// DoneLastHour counts completions in the hour before now.
	DoneLastHour int `json:"done_last_hour"`
}
