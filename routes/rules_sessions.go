package routes

import "fmt"

// drainFields are the settings that every route of a session must agree
// on, because one drainer serves the whole session.
var drainFields = []struct {
	path  string // YAML path within the route
	value func(r RouteConfig) string
}{
	{"policy.send_timeout", func(r RouteConfig) string { return r.Policy.SendTimeout.String() }},
	{"policy.max_replay_attempts", func(r RouteConfig) string { return fmt.Sprint(r.Policy.MaxReplayAttempts) }},
	{"policy.replay_budget", func(r RouteConfig) string { return r.Policy.ReplayBudget.String() }},
	{"policy.on_expired", func(r RouteConfig) string { return r.Policy.OnExpired }},
	{"policy.on_permanent_failure", func(r RouteConfig) string { return r.Policy.OnPermanentFailure }},
	{"session.drain_strategy", func(r RouteConfig) string { return r.Session.DrainStrategy.describe() }},
	{"session.batch_size", func(r RouteConfig) string { return fmt.Sprint(r.Session.BatchSize) }},
	{"policy.max_dead_letters", func(r RouteConfig) string { return fmt.Sprint(r.Policy.MaxDeadLetters) }},
	{"session.partitions", func(r RouteConfig) string { return fmt.Sprint(r.Session.Partitions) }},
}

// describe prints a drain strategy for messages.
func (d *DrainStrategy) describe() string {
	switch {
	case d == nil:
		return "default"
	case d.Type == DrainAdaptiveBackoff:
		return fmt.Sprintf("adaptive_backoff %s..%s x%g", d.MinInterval, d.MaxInterval, d.Multiplier)
	default:
		return fmt.Sprintf("%s every %s", d.Type, d.Interval)
	}
}

// checkDivergentSessions reports every drain setting on which a
// shared_outbox route differs from the first route of its session,
// positioned at the later route's field.
func (c *Config) checkDivergentSessions(add func(Problem)) {
	first := map[string]int{}
	for i, r := range c.Routes {
		if !r.UsesOutbox() || r.Session.ID == "" {
			continue
		}
		j, seen := first[r.Session.ID]
		if !seen {
			first[r.Session.ID] = i
			continue
		}
		a := c.Routes[j]
		for _, f := range drainFields {
			va, vb := f.value(a), f.value(r)
			if va == vb {
				continue
			}
			field := f.path
			if field == "session.drain_strategy" && c.Has(fmt.Sprintf("routes[%d].session.drain_interval", i)) {
				field = "session.drain_interval"
			}
			path := fmt.Sprintf("routes[%d].%s", i, field)
			if c.isBroken(fmt.Sprintf("routes[%d].%s", j, f.path)) {
				continue
			}
			add(c.Errorf(path, "divergent-drain-policy",
				"routes %q and %q share session %q but differ in %s: %s (route %q) vs %s (route %q); one drainer serves a session, so they must agree",
				a.ID, r.ID, r.Session.ID, field, va, a.ID, vb, r.ID))
		}
	}
}
