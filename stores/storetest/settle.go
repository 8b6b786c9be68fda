package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/gobridge/gobridge/stores"
)

func (s suite) settle(t *testing.T) {
	t.Run("complete removes the records", func(t *testing.T) {
		fx := s.setup(t)
		fx.append(fx.recs(3)...)
		fx.complete(fx.claimAt(1, 10, t0)...)
		wantIDs(t, "drain", fx.drain())
		if st := fx.stats(); st.Pending != 0 || !st.OldestCreatedAt.IsZero() {
			t.Errorf("Stats = %+v, want empty", st)
		}
	})

	t.Run("batch complete is all or nothing", func(t *testing.T) {
		fx := s.setup(t)
		fx.append(fx.recs(3)...)
		got := fx.claimAt(1, 10, t0)
		bad := got[1]
		bad.Token = 99
		err := fx.s.Complete(t.Context(), got[0], bad, got[2])
		if !errors.Is(err, stores.ErrStaleToken) {
			t.Fatalf("Complete with one stale token = %v, want ErrStaleToken", err)
		}
		if st := fx.stats(); st.Pending != 3 {
			t.Errorf("Stats.Pending after the failed batch = %d, want 3", st.Pending)
		}
		fx.complete(got...)
		if st := fx.stats(); st.Pending != 0 {
			t.Errorf("Stats.Pending = %d, want 0", st.Pending)
		}
	})

	t.Run("every state change checks the token", func(t *testing.T) {
		fx := s.setup(t)
		never := fx.rec()
		fx.append(never)
		never.Token = 1
		fx.checkStale(t, "never claimed", never)

		fx.append(fx.rec())
		old := fx.claimAt(1, 10, t0) // both records
		fx.claimAt(2, 10, at(30*time.Second))
		for _, r := range old {
			fx.checkStale(t, "taken over", r)
		}

		wrong := fx.claimAt(3, 10, at(time.Minute))
		if len(wrong) != 2 {
			t.Fatalf("claimed %d, want 2", len(wrong))
		}
		fx.complete(wrong[0])
		fx.checkStale(t, "completed", wrong[0])
		wrong[1].Token = 4
		fx.checkStale(t, "other token", wrong[1])
	})

	t.Run("records are named by key and token", func(t *testing.T) {
		fx := s.setup(t)
		rs := fx.recs(3)
		fx.append(rs...)
		c := fx.claimAt(5, 10, t0)
		if len(c) != 3 {
			t.Fatalf("claimed %d, want 3", len(c))
		}
		// Rebuilt from the key alone, as a caller that kept only IDs would.
		byKey := func(r stores.Record) stores.Record {
			return stores.Record{Session: r.Session, Route: r.Route, Envelope: r.Envelope, Token: 5}
		}
		fx.complete(byKey(c[0]))
		if err := fx.s.Release(t.Context(), byKey(c[1]), t0, "x"); err != nil {
			t.Errorf("Release by key: %v", err)
		}
		if err := fx.s.DeadLetter(t.Context(), byKey(c[2]), "x"); err != nil {
			t.Errorf("DeadLetter by key: %v", err)
		}
		wantIDs(t, "drain", fx.drain(), c[1].Envelope.ID)
	})

	t.Run("release keeps the poison bookkeeping", func(t *testing.T) {
		fx := s.setup(t)
		fx.append(fx.rec())
		c := fx.claimAt(1, 1, at(time.Second))
		if err := fx.s.Release(t.Context(), c[0], at(time.Minute), "503 busy"); err != nil {
			t.Fatal(err)
		}
		if st := fx.stats(); st.Pending != 1 {
			t.Errorf("Stats.Pending = %d, want 1", st.Pending)
		}
		wantIDs(t, "claim before next attempt", ids(fx.claimAt(2, 1, at(59*time.Second))))
		c = fx.claimAt(2, 1, at(time.Minute))
		if len(c) != 1 {
			t.Fatalf("claimed %d, want 1", len(c))
		}
		g := c[0]
		if g.Attempts != 2 || g.LastError != "503 busy" || g.Token != 2 {
			t.Errorf("Attempts, LastError, Token = %d, %q, %d; want 2, %q, 2", g.Attempts, g.LastError, g.Token, "503 busy")
		}
		wantTime(t, "FirstAttemptAt", g.FirstAttemptAt, at(time.Second))
		wantTime(t, "NextAttemptAt", g.NextAttemptAt, at(time.Minute))
		if err := fx.s.Release(t.Context(), g, at(2*time.Minute), "timeout"); err != nil {
			t.Fatal(err)
		}
		g = fx.claimAt(3, 1, at(2*time.Minute))[0]
		if g.Attempts != 3 || g.LastError != "timeout" {
			t.Errorf("Attempts, LastError = %d, %q; want 3, %q", g.Attempts, g.LastError, "timeout")
		}
		wantTime(t, "FirstAttemptAt", g.FirstAttemptAt, at(time.Second))
	})
}

// checkStale asserts that Complete, Release and DeadLetter of r all fail with
// ErrStaleToken and change nothing.
func (fx *fixture) checkStale(t *testing.T, what string, r stores.Record) {
	t.Helper()
	before := fx.stats()
	if err := fx.s.Complete(t.Context(), r); !errors.Is(err, stores.ErrStaleToken) {
		t.Errorf("%s: Complete = %v, want ErrStaleToken", what, err)
	}
	if err := fx.s.Release(t.Context(), r, t0, "x"); !errors.Is(err, stores.ErrStaleToken) {
		t.Errorf("%s: Release = %v, want ErrStaleToken", what, err)
	}
	if err := fx.s.DeadLetter(t.Context(), r, "x"); !errors.Is(err, stores.ErrStaleToken) {
		t.Errorf("%s: DeadLetter = %v, want ErrStaleToken", what, err)
	}
	if _, err := fx.s.GetDead(t.Context(), r.Envelope.ID); !errors.Is(err, stores.ErrNotFound) {
		t.Errorf("%s: GetDead after a stale DeadLetter = %v, want ErrNotFound", what, err)
	}
	if after := fx.stats(); after.Pending != before.Pending || !after.OldestCreatedAt.Equal(before.OldestCreatedAt) {
		t.Errorf("%s: Stats changed from %+v to %+v", what, before, after)
	}
}
