package storetest

import (
	"testing"
	"time"

	"github.com/gobridge/gobridge/stores"
)

// keyed returns records of the fixture with the given ordering keys, in order.
func (fx *fixture) keyed(keys ...string) []stores.Record {
	rs := fx.recs(len(keys))
	for i, k := range keys {
		rs[i].Envelope.Key = k
	}
	return rs
}

func (s suite) ordering(t *testing.T) {
	t.Run("records of one key come in Seq order in one claim", func(t *testing.T) {
		fx := s.setup(t)
		rs := fx.keyed("a", "b", "a", "")
		fx.append(rs...)
		wantIDs(t, "claim", ids(fx.claimAt(1, 10, t0)), ids(rs)...)
	})

	t.Run("a retrying record holds back only its own key", func(t *testing.T) {
		fx := s.setup(t)
		rs := fx.keyed("a", "a", "b")
		fx.append(rs...)
		first := fx.claimAt(1, 1, t0)
		if err := fx.s.Release(t.Context(), first[0], at(time.Minute), "timeout"); err != nil {
			t.Fatal(err)
		}
		b := fx.claimAt(1, 10, at(time.Second))
		wantIDs(t, "claim while a1 waits", ids(b), rs[2].Envelope.ID)
		fx.complete(b...)
		wantIDs(t, "claim when a1 is due", ids(fx.claimAt(1, 10, at(time.Minute))), rs[0].Envelope.ID, rs[1].Envelope.ID)
	})

	t.Run("a claimed record holds back its key until settled", func(t *testing.T) {
		fx := s.setup(t)
		rs := fx.keyed("a", "a", "b")
		fx.append(rs...)
		first := fx.claimAt(1, 1, t0)
		wantIDs(t, "claim while a1 is claimed", ids(fx.claimAt(1, 10, t0)), rs[2].Envelope.ID)
		fx.complete(first...)
		wantIDs(t, "claim after a1 is done", ids(fx.claimAt(1, 10, t0)), rs[1].Envelope.ID)
	})

	t.Run("a lapsed claim does not hold back its key", func(t *testing.T) {
		fx := s.setup(t)
		rs := fx.keyed("a", "a")
		fx.append(rs...)
		fx.claimAt(1, 1, t0)
		wantIDs(t, "claim after the lapse", ids(fx.claimAt(2, 10, at(30*time.Second))), ids(rs)...)
	})

	t.Run("a dead letter does not hold back its key", func(t *testing.T) {
		fx := s.setup(t)
		rs := fx.keyed("a", "a")
		fx.append(rs...)
		first := fx.claimAt(1, 1, t0)
		if err := fx.s.DeadLetter(t.Context(), first[0], "poison"); err != nil {
			t.Fatal(err)
		}
		wantIDs(t, "claim", ids(fx.claimAt(1, 10, t0)), rs[1].Envelope.ID)
	})
}
