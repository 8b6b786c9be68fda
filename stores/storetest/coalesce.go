package storetest

import (
	"testing"
	"time"
)

func (s suite) coalesce(t *testing.T) {
	t.Run("a newer record replaces a pending one", func(t *testing.T) {
		fx := s.setup(t)
		old, other, newer := fx.rec(), fx.rec(), fx.rec()
		old.CoalesceKey, newer.CoalesceKey = "dev-1", "dev-1"
		newer.Envelope.ReceivedAt = at(time.Second)
		fx.append(old, other)
		fx.append(newer)
		got := fx.claimAt(1, 10, t0)
		wantIDs(t, "claim", ids(got), other.Envelope.ID, newer.Envelope.ID)
		if got[1].Seq <= got[0].Seq {
			t.Errorf("replacement Seq %d not after %d: it is newer data", got[1].Seq, got[0].Seq)
		}
		if st := fx.stats(); st.Pending != 2 {
			t.Errorf("Stats.Pending = %d, want 2", st.Pending)
		}
	})

	t.Run("an older record is absorbed", func(t *testing.T) {
		fx := s.setup(t)
		newer, older := fx.rec(), fx.rec()
		newer.CoalesceKey, older.CoalesceKey = "dev-1", "dev-1"
		newer.Envelope.ReceivedAt = at(time.Second)
		fx.append(newer)
		fx.append(older)
		if !s.f.ForgetsDone {
			fx.append(older)
		}
		wantIDs(t, "claim", ids(fx.claimAt(1, 10, t0)), newer.Envelope.ID)
		if st := fx.stats(); st.Pending != 1 {
			t.Errorf("Stats.Pending = %d, want 1", st.Pending)
		}
	})

	t.Run("within one batch the newest wins", func(t *testing.T) {
		fx := s.setup(t)
		rs := fx.recs(3)
		for i := range rs {
			rs[i].CoalesceKey = "dev-1"
		}
		rs[1].Envelope.ReceivedAt = at(2 * time.Second)
		rs[2].Envelope.ReceivedAt = at(time.Second)
		fx.append(rs...)
		wantIDs(t, "claim", ids(fx.claimAt(1, 10, t0)), rs[1].Envelope.ID)
	})

	t.Run("a claimed record is not replaced", func(t *testing.T) {
		fx := s.setup(t)
		old, newer := fx.rec(), fx.rec()
		old.CoalesceKey, newer.CoalesceKey = "dev-1", "dev-1"
		newer.Envelope.ReceivedAt = at(time.Second)
		fx.append(old)
		c := fx.claimAt(1, 10, t0)
		fx.append(newer)
		wantIDs(t, "claim", ids(fx.claimAt(2, 10, t0)), newer.Envelope.ID)
		fx.complete(c...)
	})

	t.Run("other routes and keys are not replaced", func(t *testing.T) {
		fx := s.setup(t)
		a, b, c := fx.rec(), fx.rec(), fx.rec()
		a.CoalesceKey, b.CoalesceKey, c.CoalesceKey = "dev-1", "dev-2", "dev-1"
		c.Route = fx.route + "-other"
		b.Envelope.ReceivedAt = at(time.Second)
		c.Envelope.ReceivedAt = at(time.Second)
		fx.append(a)
		fx.append(b, c)
		wantIDs(t, "claim", ids(fx.claimAt(1, 10, t0)), a.Envelope.ID, b.Envelope.ID, c.Envelope.ID)
	})
}
