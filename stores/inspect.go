package stores

import (
	"cmp"
	"context"
	"slices"
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

// RouteStatsSet collects the RouteStats of an Inspect by (Session, Route).
type RouteStatsSet map[[2]string]*RouteStats

// Get returns the stats of session and route, adding them when new.
func (set RouteStatsSet) Get(session, route string) *RouteStats {
	k := [2]string{session, route}
	if set[k] == nil {
		set[k] = &RouteStats{Session: session, Route: route}
	}
	return set[k]
}

// Sorted returns the stats sorted by Session, then Route: the order Inspect
// promises.
func (set RouteStatsSet) Sorted() []RouteStats {
	out := make([]RouteStats, 0, len(set))
	for _, st := range set {
		out = append(out, *st)
	}
	slices.SortFunc(out, func(a, b RouteStats) int {
		return cmp.Or(cmp.Compare(a.Session, b.Session), cmp.Compare(a.Route, b.Route))
	})
	return out
}
