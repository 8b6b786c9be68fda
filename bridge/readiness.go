package bridge

import (
	"context"
	"fmt"
	"sort"
	"time"
)

// defaultStallAfter is session.stall_after when unset (DESIGN.md §1.8).
const defaultStallAfter = 10 * time.Minute

// monitorInterval is how often receiver states and outbox gauges are read.
const monitorInterval = time.Second

// Readiness is the body of /readyz.
type Readiness struct {
	Ready bool `json:"ready"`
	// Reasons names everything that is not ready; empty when ready.
	Reasons []string `json:"reasons"`
}

// Ready evaluates readiness now (DESIGN.md §1.8): not ready when a receiver
// is disconnected or has not all its subscriptions, or when a session's
// oldest pending record is older than its stall_after and nothing was sent
// successfully on the session within that window.
func (rt *Runtime) Ready(ctx context.Context) Readiness {
	reasons := []string{}
	for _, nr := range rt.receivers {
		st := nr.r.Status()
		switch {
		case !st.Connected:
			reasons = append(reasons, withReason(fmt.Sprintf("receiver %s: disconnected", nr.id), st.Reason))
		case !st.Subscribed:
			reasons = append(reasons, withReason(fmt.Sprintf("receiver %s: not subscribed", nr.id), st.Reason))
		}
	}
	now := time.Now()
	for _, sid := range rt.sessionIDs() {
		si := rt.sessions[sid]
		st, err := rt.outbox.Stats(ctx, sid)
		if err != nil {
			reasons = append(reasons, fmt.Sprintf("session %s: read outbox stats: %v", sid, err))
			continue
		}
		if st.Pending == 0 || st.OldestCreatedAt.IsZero() {
			continue
		}
		age := now.Sub(st.OldestCreatedAt)
		if age <= si.stallAfter {
			continue
		}
		last, _ := rt.lastSent.Load(sid)
		lastAt, _ := last.(time.Time)
		if !lastAt.IsZero() && now.Sub(lastAt) <= si.stallAfter {
			continue
		}
		sentDesc := "nothing sent since start"
		if !lastAt.IsZero() {
			sentDesc = fmt.Sprintf("last send %s ago", now.Sub(lastAt).Round(time.Second))
		}
		reasons = append(reasons, fmt.Sprintf("session %s: stalled: oldest pending record is %s old (stall_after %s), %s",
			sid, age.Round(time.Second), si.stallAfter, sentDesc))
	}
	return Readiness{Ready: len(reasons) == 0, Reasons: reasons}
}

func withReason(s, reason string) string {
	if reason == "" {
		return s
	}
	return s + ": " + reason
}

func (rt *Runtime) sessionIDs() []string {
	ids := make([]string, 0, len(rt.sessions))
	for id := range rt.sessions {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// monitor refreshes the receiver and outbox gauges every monitorInterval
// until ctx is done. Run owns the goroutine that calls it.
func (rt *Runtime) monitor(ctx context.Context) {
	t := time.NewTicker(monitorInterval)
	defer t.Stop()
	for {
		for _, nr := range rt.receivers {
			st := nr.r.Status()
			rt.metrics.connected.WithLabelValues(nr.id).Set(b2f(st.Connected))
			rt.metrics.subscribed.WithLabelValues(nr.id).Set(b2f(st.Subscribed))
		}
		now := time.Now()
		for _, sid := range rt.sessionIDs() {
			if rt.commit != nil {
				rt.commit.refresh(ctx, sid)
			}
			st, err := rt.outbox.Stats(ctx, sid)
			if err != nil {
				continue
			}
			rt.metrics.pending.WithLabelValues(sid).Set(float64(st.Pending))
			age := 0.0
			if st.Pending > 0 && !st.OldestCreatedAt.IsZero() {
				age = now.Sub(st.OldestCreatedAt).Seconds()
			}
			rt.metrics.oldestAge.WithLabelValues(sid).Set(age)
		}
		rt.metrics.ready.Set(b2f(rt.Ready(ctx).Ready))
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
