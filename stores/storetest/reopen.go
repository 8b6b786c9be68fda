package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/gobridge/gobridge/stores"
)

// reopen checks that durable backends keep records, claims, dead letters,
// counters and Seq order across a close and reopen.
func (s suite) reopen(t *testing.T) {
	t.Run("state survives a reopen", func(t *testing.T) {
		fx := s.setup(t)
		rs := fx.recs(4)
		fx.append(rs...)
		c := fx.claimAt(1, 2, t0)
		fx.complete(c[0])
		dead := c[1]
		dead.DeadAt = at(time.Second)
		if err := fx.s.DeadLetter(t.Context(), dead, "poison"); err != nil {
			t.Fatal(err)
		}
		claimed := fx.claimAt(2, 1, t0)

		fx.s = s.f.Reopen(t, fx.s)

		fx.wantStats(t, "after reopen", 2, t0)
		if err := fx.s.Complete(t.Context(), claimed...); err != nil {
			t.Fatalf("Complete of a claim made before the reopen: %v", err)
		}
		if !s.f.ForgetsDone {
			fx.append(rs[0])
		}
		d, err := fx.s.GetDead(t.Context(), rs[1].Envelope.ID)
		if err != nil || d.DeadReason != "poison" {
			t.Fatalf("GetDead = %+v, %v; want the dead letter", d, err)
		}
		more := fx.rec()
		fx.append(more)
		got := fx.claimAt(3, 10, t0)
		wantIDs(t, "claim", ids(got), rs[3].Envelope.ID, more.Envelope.ID)
		if got[1].Seq <= got[0].Seq || got[0].Seq <= claimed[0].Seq {
			t.Errorf("Seq after reopen: %d, %d after %d; want increasing", got[0].Seq, got[1].Seq, claimed[0].Seq)
		}
		if err := fx.s.Complete(t.Context(), claimed...); !errors.Is(err, stores.ErrStaleToken) {
			t.Errorf("second Complete = %v, want ErrStaleToken", err)
		}
	})
}
