package bridge

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/gobridge/gobridge/stores"
)

const (
	monitorInterval    = time.Second      // see monitor
	appendFailingAfter = 30 * time.Second // how long outbox writes may fail before /readyz says so (DESIGN.md §11.1)
)

// Readiness is the body of /readyz.
type Readiness struct {
	Ready bool `json:"ready"`
	// Reasons names everything that is not ready; empty when ready.
	Reasons []string `json:"reasons"`
}

// Ready evaluates readiness now (DESIGN.md §1.8 and §11.1): not ready when
// a receiver is disconnected or unsubscribed; when a session's oldest live
// record is older than its stall_after and nothing was sent in that window;
// when a direct_hold route has held its source longer than stall_after;
// when outbox writes have failed for 30s; when a session or route is at a
// limit; or when a record could not be stored at all.
func (b *Bridge) Ready(ctx context.Context) Readiness {
	p := b.cur.Load()
	reasons := []string{}
	add := func(format string, args ...any) { reasons = append(reasons, fmt.Sprintf(format, args...)) }
	for _, nr := range p.receivers {
		st := nr.r.Status()
		switch {
		case !st.Connected:
			add("receiver %s: disconnected%s", nr.id, withReason(st.Reason))
		case !st.Subscribed:
			add("receiver %s: not subscribed%s", nr.id, withReason(st.Reason))
		}
	}
	now := b.clock.Now()
	for _, r := range p.routes {
		if r.hold == nil {
			continue
		}
		if since, limit := r.hold.heldSince(), r.cfg.Policy.StallAfter.D(); !since.IsZero() && now.Sub(since) > limit {
			add("route %s: has held its source for %s (stall_after %s): its target does not accept%s",
				r.id, now.Sub(since).Round(time.Second), limit, withReason(r.health.LastError()))
		}
	}
	if b.store == nil {
		return Readiness{Ready: len(reasons) == 0, Reasons: reasons}
	}
	if d := b.writer.failingFor(); d > appendFailingAfter {
		add("outbox: writes have failed for %s", d.Round(time.Second))
	}
	stats, err := b.store.Stats(ctx)
	if err != nil {
		add("outbox: read stats: %v", err)
	}
	for _, st := range stats {
		if s := p.sessions[st.Session]; s != nil {
			if reason := b.stalled(s, st, now); reason != "" {
				reasons = append(reasons, reason)
			}
		}
	}
	sessions, routes := b.limits.full()
	for _, s := range sessions {
		add("session %s: at max_outbox_depth or max_outbox_bytes: ingest is pushing back on the publishers", s)
	}
	for _, r := range routes {
		add("route %s: holds max_dead_letters: records that would die are retried, ingest dead letters push back", r)
	}
	refused := b.limits.refusals()
	for _, r := range slices.Sorted(maps.Keys(refused)) {
		add("route %s: %s", r, refused[r])
	}
	return Readiness{Ready: len(reasons) == 0, Reasons: reasons}
}

// stalled says why session s is stalled, or "" when it is not.
func (b *Bridge) stalled(s *session, st stores.SessionStats, now time.Time) string {
	age := b.oldestAge(st, now)
	if st.Live == 0 || st.Oldest.IsZero() || age <= s.stallAfter {
		return ""
	}
	last, _ := b.lastSent.Load(s.id)
	lastAt, _ := last.(time.Time)
	if !lastAt.IsZero() && now.Sub(lastAt) <= s.stallAfter {
		return ""
	}
	sent := "nothing sent since start"
	if !lastAt.IsZero() {
		sent = fmt.Sprintf("last send %s ago", now.Sub(lastAt).Round(time.Second))
	}
	var errs []string // its targets' last errors: why nothing is sent
	for _, r := range s.members {
		if e := r.health.LastError(); e != "" && !slices.Contains(errs, e) {
			errs = append(errs, e)
		}
	}
	if len(errs) > 0 {
		slices.Sort(errs)
		sent += ": last target error: " + strings.Join(errs, "; ")
	}
	return fmt.Sprintf("session %s: stalled: oldest pending record is %s old (stall_after %s), %s",
		s.id, age.Round(time.Second), s.stallAfter, sent)
}

// oldestAge is how old the oldest live record of st is at now, across the
// wall-clock steps this process saw (stores.Clock), and never negative: a
// record written before an unseen step back counts as new until the clock
// passes its creation time again.
func (b *Bridge) oldestAge(st stores.SessionStats, now time.Time) time.Duration {
	if st.Oldest.IsZero() {
		return 0
	}
	return max(now.Round(0).Sub(b.clock.Rebase(st.Oldest, st.Oldest)), 0)
}

func withReason(reason string) string {
	if reason == "" {
		return ""
	}
	return ": " + reason
}

// monitor refreshes the outbox gauges, the admission counts and
// gobridge_ready every monitorInterval until ctx is done.
func (b *Bridge) monitor(ctx context.Context) {
	t := time.NewTicker(monitorInterval)
	defer t.Stop()
	for {
		if b.store != nil {
			b.limits.refresh(ctx, true)
			if stats, err := b.store.Stats(ctx); err == nil {
				b.outboxGauges(stats, b.clock.Now())
			}
		}
		b.metrics.ready.Set(b2f(b.Ready(ctx).Ready))
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// outboxGauges sets the outbox gauges of the configuration's sessions and
// routes; one that a reload removed after stats were read stays forgotten.
// A route's dead letters count in whatever session holds them.
func (b *Bridge) outboxGauges(stats []stores.SessionStats, now time.Time) {
	b.gaugeMu.Lock()
	defer b.gaugeMu.Unlock()
	p := b.cur.Load()
	seen := map[string]bool{}
	dead := map[string]int{}
	for _, st := range stats {
		for r, c := range st.Routes { // a route's dead letters in every session, as max_dead_letters counts them
			dead[r] += c.Dead
		}
		if p.sessions[st.Session] == nil {
			continue
		}
		seen[st.Session] = true
		b.metrics.pending.WithLabelValues(st.Session).Set(float64(st.Live))
		b.metrics.bytes.WithLabelValues(st.Session).Set(float64(st.Bytes))
		age := 0.0
		if st.Live > 0 {
			age = b.oldestAge(st, now).Seconds()
		}
		b.metrics.oldestAge.WithLabelValues(st.Session).Set(age)
	}
	for id := range p.sessions {
		if !seen[id] {
			b.metrics.pending.WithLabelValues(id).Set(0)
			b.metrics.bytes.WithLabelValues(id).Set(0)
			b.metrics.oldestAge.WithLabelValues(id).Set(0)
		}
	}
	for _, r := range p.routes {
		b.metrics.deadLetters.WithLabelValues(r.id).Set(float64(dead[r.id]))
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
