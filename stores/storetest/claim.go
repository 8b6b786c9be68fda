package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/gobridge/gobridge/stores"
)

func (s suite) claim(t *testing.T) {
	t.Run("in seq order, up to the limit, one partition", func(t *testing.T) {
		fx := s.setup(t)
		rs := fx.recs(5)
		rs[3].Partition = 1
		rs[1].NextAttemptAt = at(time.Hour) // claims ignore it: the owner schedules
		fx.append(rs...)
		le := fx.lease(0, "o1", t0)
		got := fx.claim(0, le, 2)
		wantIDs(t, "first claim", ids(got), rs[0].Envelope.ID, rs[1].Envelope.ID)
		for _, r := range got {
			if r.Token != le.Token || r.Partition != 0 || r.Session != fx.session || r.Route != fx.route {
				t.Errorf("claimed record = %+v", r)
			}
		}
		wantIDs(t, "second claim", ids(fx.claim(0, le, 10)), rs[2].Envelope.ID, rs[4].Envelope.ID)
		wantIDs(t, "third claim", ids(fx.claim(0, le, 10)))
		wantIDs(t, "partition 1", fx.drain(1), rs[3].Envelope.ID)
	})

	t.Run("returns the envelope as appended", func(t *testing.T) {
		fx := s.setup(t)
		r := fx.rec()
		r.Envelope.Headers = map[string]string{"site": "plant-1", "k": ""}
		r.Envelope.Key, r.Envelope.QoS = "factory/1", 2
		r.Envelope.Payload = []byte{0, 1, 2, 255}
		r.Envelope.ReceivedAt = at(1500 * time.Millisecond)
		r.ExpiresAt, r.CausationID, r.Raw = at(time.Hour), "cause", true
		fx.append(r)
		got := fx.claim(0, fx.lease(0, "o1", t0), 1)
		if len(got) != 1 {
			t.Fatalf("claimed %d", len(got))
		}
		g := got[0]
		e := g.Envelope
		if e.ID != r.Envelope.ID || e.Topic != r.Envelope.Topic || string(e.Payload) != string(r.Envelope.Payload) ||
			e.QoS != 2 || e.Key != "factory/1" || len(e.Headers) != 2 || e.Headers["site"] != "plant-1" ||
			g.CausationID != "cause" || !g.Raw {
			t.Errorf("claimed %+v, appended %+v", g, r)
		}
		wantTime(t, "ReceivedAt", e.ReceivedAt, r.Envelope.ReceivedAt)
		wantTime(t, "ExpiresAt", g.ExpiresAt, r.ExpiresAt)
		wantTime(t, "CreatedAt", g.CreatedAt, t0)
	})

	t.Run("takes over the claims of an older token", func(t *testing.T) {
		fx := s.setup(t)
		rs := fx.append(fx.recs(3)...)
		old := fx.lease(0, "o1", t0)
		fx.claim(0, old, 2)
		cur := fx.lease(0, "o2", at(time.Hour))
		got := fx.claim(0, cur, 10)
		wantIDs(t, "new owner's claim", ids(got), ids(rs)...)
		if len(got) == 3 && got[0].Token != cur.Token {
			t.Errorf("token %d, want %d", got[0].Token, cur.Token)
		}
	})

	t.Run("needs the current token of the partition's lease", func(t *testing.T) {
		fx := s.setup(t)
		fx.append(fx.recs(2)...)
		old := fx.lease(0, "o1", t0)
		cur := fx.lease(0, "o2", at(time.Hour))
		for _, tok := range []int64{old.Token, cur.Token + 1} {
			_, err := fx.s.Claim(t.Context(), stores.ClaimRequest{Session: fx.session, Token: tok, Limit: 10})
			if !errors.Is(err, stores.ErrLeaseLost) {
				t.Errorf("Claim with token %d = %v, want ErrLeaseLost", tok, err)
			}
		}
		if err := fx.s.Release(t.Context(), cur); err != nil {
			t.Fatal(err)
		}
		_, err := fx.s.Claim(t.Context(), stores.ClaimRequest{Session: fx.session, Token: cur.Token, Limit: 10})
		if !errors.Is(err, stores.ErrLeaseLost) {
			t.Errorf("Claim after Release = %v, want ErrLeaseLost", err)
		}
	})

	t.Run("after skips what the claimer holds", func(t *testing.T) {
		fx := s.setup(t)
		le := fx.lease(0, "o1", t0)
		fx.append(fx.recs(3)...)
		held := fx.claim(0, le, 10)
		later := fx.append(fx.recs(2)...)
		got, err := fx.s.Claim(t.Context(), stores.ClaimRequest{
			Session: fx.session, Token: le.Token, Limit: 10, After: held[len(held)-1].Seq,
		})
		if err != nil {
			t.Fatal(err)
		}
		wantIDs(t, "claim after the held ones", ids(got), ids(later)...)
	})

	t.Run("rejects a malformed request", func(t *testing.T) {
		fx := s.setup(t)
		for _, req := range []stores.ClaimRequest{
			{Session: "", Token: 1, Limit: 1},
			{Session: fx.session, Token: 1, Limit: 0},
			{Session: fx.session, Token: 0, Limit: 1},
			{Session: fx.session, Partition: -1, Token: 1, Limit: 1},
		} {
			if _, err := fx.s.Claim(t.Context(), req); !errors.Is(err, stores.ErrInvalid) {
				t.Errorf("Claim(%+v) = %v, want ErrInvalid", req, err)
			}
		}
	})
}
