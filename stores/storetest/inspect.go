package storetest

import (
	"testing"
	"time"

	"github.com/gobridge/gobridge/stores"
)

// inspect checks stores.Inspector, for backends that implement it.
func (s suite) inspect(t *testing.T) {
	t.Run("counts pending, claimed, due, dead and done per route", func(t *testing.T) {
		fx := s.setup(t)
		in, ok := fx.s.(stores.Inspector)
		if !ok {
			t.Skip("backend does not implement stores.Inspector")
		}
		other := fx.route + "-b"
		rs := fx.recs(6)
		for i := range rs {
			rs[i].CreatedAt = at(time.Duration(i) * time.Second)
		}
		rs[4].Route, rs[5].Route = other, other
		rs[5].NextAttemptAt = at(time.Hour) // not due at t0+1m
		fx.append(rs...)
		c := fx.claimAt(1, 3, at(time.Minute)) // rs[0..2] of route a
		fx.complete(c[0])
		if err := fx.s.DeadLetter(t.Context(), c[1], "boom"); err != nil {
			t.Fatal(err)
		}
		got := map[string]stores.RouteStats{}
		all, err := in.Inspect(t.Context(), at(time.Minute))
		if err != nil {
			t.Fatalf("Inspect: %v", err)
		}
		for _, st := range all {
			if st.Session == fx.session {
				got[st.Route] = st
			}
		}
		a, b := got[fx.route], got[other]
		// Route a: rs[2] claimed, rs[3] pending and due, rs[1] dead, rs[0] done.
		if a.Pending != 1 || a.Claimed != 1 || a.Due != 1 || a.Dead != 1 {
			t.Errorf("route a = %+v, want pending 1, claimed 1, due 1, dead 1", a)
		}
		wantTime(t, "route a OldestPendingAt", a.OldestPendingAt, at(2*time.Second))
		// DoneLastHour is stamped by the store's own clock.
		a2 := inspectRoute(t, in, fx.session, fx.route, time.Now())
		if a2.DoneLastHour != 1 {
			t.Errorf("route a DoneLastHour at wall clock = %d, want 1", a2.DoneLastHour)
		}
		if a3 := inspectRoute(t, in, fx.session, fx.route, time.Now().Add(2*time.Hour)); a3.DoneLastHour != 0 {
			t.Errorf("route a DoneLastHour two hours later = %d, want 0", a3.DoneLastHour)
		}
		if b.Pending != 2 || b.Claimed != 0 || b.Due != 1 || b.Dead != 0 || b.DoneLastHour != 0 {
			t.Errorf("route b = %+v, want pending 2, due 1", b)
		}
		wantTime(t, "route b OldestPendingAt", b.OldestPendingAt, at(4*time.Second))
		// A requeued dead letter is pending again; a dropped one is gone.
		d, _, err := fx.s.ListDead(t.Context(), stores.DeadFilter{Route: fx.route})
		if err != nil || len(d) != 1 {
			t.Fatalf("ListDead = %d, %v", len(d), err)
		}
		if _, err := fx.s.Requeue(t.Context(), d[0].Envelope.ID, at(time.Minute)); err != nil {
			t.Fatal(err)
		}
		a = inspectRoute(t, in, fx.session, fx.route, at(time.Minute))
		if a.Pending != 2 || a.Dead != 0 {
			t.Errorf("after requeue: route a = %+v, want pending 2, dead 0", a)
		}
	})
}

func inspectRoute(t *testing.T, in stores.Inspector, session, route string, now time.Time) stores.RouteStats {
	t.Helper()
	all, err := in.Inspect(t.Context(), now)
	if err != nil {
		t.Fatalf("Inspect: %v", err)
	}
	for _, st := range all {
		if st.Session == session && st.Route == route {
			return st
		}
	}
	return stores.RouteStats{Session: session, Route: route}
}
