package storetest

import (
	"testing"
	"time"
)

func (s suite) stats(t *testing.T) {
	t.Run("counts pending and claimed records exactly", func(t *testing.T) {
		fx := s.setup(t)
		if st := fx.stats(); st.Pending != 0 || !st.OldestCreatedAt.IsZero() {
			t.Fatalf("empty Stats = %+v", st)
		}
		rs := fx.recs(4)
		for i := range rs {
			rs[i].CreatedAt = at(time.Duration(i) * time.Second)
		}
		rs[3].Partition = 1
		fx.append(rs...)
		fx.wantStats(t, "after append", 4, t0)
		c := fx.claimAt(1, 2, t0)
		fx.wantStats(t, "after claim", 4, t0)
		fx.complete(c[0])
		fx.wantStats(t, "after complete", 3, at(time.Second))
		if err := fx.s.Release(t.Context(), c[1], t0, "x"); err != nil {
			t.Fatal(err)
		}
		fx.wantStats(t, "after release", 3, at(time.Second))
		c = fx.claimAt(1, 2, t0)
		if err := fx.s.DeadLetter(t.Context(), c[0], "x"); err != nil {
			t.Fatal(err)
		}
		fx.wantStats(t, "after dead-letter", 2, at(2*time.Second))
		fx.complete(c[1])
		fx.wantStats(t, "with only partition 1 left", 1, at(3*time.Second))
		other := fx.rec()
		other.Session = fx.session + "-other"
		fx.append(other)
		fx.wantStats(t, "after another session's append", 1, at(3*time.Second))
		fx.complete(fx.claimPart(1, 1, 10, t0)...)
		fx.wantStats(t, "when empty", 0, time.Time{})
	})
}

func (fx *fixture) wantStats(t *testing.T, what string, pending int, oldest time.Time) {
	t.Helper()
	st := fx.stats()
	if st.Pending != pending || !st.OldestCreatedAt.Equal(oldest) {
		t.Errorf("%s: Stats = {Pending: %d, Oldest: %v}, want {%d, %v}", what, st.Pending, st.OldestCreatedAt, pending, oldest)
	}
}
