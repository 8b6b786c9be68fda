package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/gobridge/gobridge/stores"
)

func (s suite) claim(t *testing.T) {
	t.Run("returns due records in Seq order up to the limit", func(t *testing.T) {
		fx := s.setup(t)
		rs := fx.recs(5)
		fx.append(rs...)
		wantIDs(t, "first claim", ids(fx.claimAt(1, 2, t0)), rs[0].Envelope.ID, rs[1].Envelope.ID)
		wantIDs(t, "second claim", ids(fx.claimAt(1, 2, t0)), rs[2].Envelope.ID, rs[3].Envelope.ID)
		wantIDs(t, "third claim", ids(fx.claimAt(1, 2, t0)), rs[4].Envelope.ID)
		wantIDs(t, "fourth claim", ids(fx.claimAt(1, 2, t0)))
	})

	t.Run("stamps token, deadline, attempts and first attempt", func(t *testing.T) {
		fx := s.setup(t)
		fx.append(fx.rec())
		got := fx.claimAt(42, 1, at(time.Second))
		if len(got) != 1 {
			t.Fatalf("claimed %d, want 1", len(got))
		}
		g := got[0]
		if g.State != stores.Claimed || g.Token != 42 || g.Attempts != 1 {
			t.Errorf("State, Token, Attempts = %s, %d, %d; want claimed, 42, 1", g.State, g.Token, g.Attempts)
		}
		wantTime(t, "ClaimUntil", g.ClaimUntil, at(31*time.Second))
		wantTime(t, "FirstAttemptAt", g.FirstAttemptAt, at(time.Second))
	})

	t.Run("record not yet due is invisible", func(t *testing.T) {
		fx := s.setup(t)
		later, now := fx.rec(), fx.rec()
		later.NextAttemptAt = at(time.Minute)
		fx.append(later, now)
		wantIDs(t, "claim before due", ids(fx.claimAt(1, 10, at(time.Minute-time.Millisecond))), now.Envelope.ID)
		wantIDs(t, "claim when due", ids(fx.claimAt(1, 10, at(time.Minute))), later.Envelope.ID)
	})

	t.Run("lapsed claim is claimable again and the old token is stale", func(t *testing.T) {
		fx := s.setup(t)
		fx.append(fx.rec())
		first := fx.claimAt(1, 1, t0) // until t0+30s
		wantIDs(t, "claim before the deadline", ids(fx.claimAt(2, 1, at(29*time.Second))))
		second := fx.claimAt(2, 1, at(30*time.Second))
		wantIDs(t, "claim at the deadline", ids(second), first[0].Envelope.ID)
		g := second[0]
		if g.Attempts != 2 || g.Token != 2 {
			t.Errorf("Attempts, Token = %d, %d; want 2, 2", g.Attempts, g.Token)
		}
		wantTime(t, "FirstAttemptAt", g.FirstAttemptAt, t0)
		if err := fx.s.Complete(t.Context(), first[0]); !errors.Is(err, stores.ErrStaleToken) {
			t.Fatalf("Complete with the lapsed token = %v, want ErrStaleToken", err)
		}
		fx.complete(g)
		wantIDs(t, "drain", fx.drain())
	})

	t.Run("partitions and sessions are separate", func(t *testing.T) {
		fx := s.setup(t)
		p0, p1 := fx.rec(), fx.rec()
		p1.Partition = 1
		other := fx.rec()
		other.Session = fx.session + "-other"
		fx.append(p0, p1, other)
		wantIDs(t, "partition 1", ids(fx.claimPart(1, 1, 10, t0)), p1.Envelope.ID)
		wantIDs(t, "partition 0", ids(fx.claimPart(0, 1, 10, t0)), p0.Envelope.ID)
	})

	t.Run("rejects a limit below 1", func(t *testing.T) {
		fx := s.setup(t)
		fx.append(fx.rec())
		_, err := fx.s.Claim(t.Context(), stores.ClaimRequest{Session: fx.session, Token: 1, Limit: 0, Now: t0, Until: at(time.Second)})
		if !errors.Is(err, stores.ErrInvalid) {
			t.Fatalf("Claim with Limit 0 = %v, want ErrInvalid", err)
		}
	})
}
