package storetest

import (
	"testing"
	"time"

	"github.com/gobridge/gobridge/stores"
)

func (s suite) reopen(t *testing.T) {
	t.Run("records, dead letters and tombstones survive", func(t *testing.T) {
		fx := s.setup(t)
		rs := fx.append(fx.recs(4)...)
		d := fx.rec()
		d.State, d.DeadReason = stores.Dead, "bad"
		fx.append(d)
		le := fx.lease(0, "o1", t0)
		got := fx.claim(0, le, 2)
		fx.settle(stores.Done, le.Token, "", got[0])
		fx.write(stores.Batch{Settle: []stores.Settlement{{
			Key: got[1].Key(), Token: le.Token, Outcome: stores.Retry, Attempts: 2, FirstAttemptAt: at(time.Second), Reason: "503",
		}}})

		fx.s = s.f.Reopen(t, fx.s)

		if fx.append(rs[0])[0].Seq != 0 {
			t.Error("a delivered record was appended again after the reopen")
		}
		next := fx.append(fx.rec())[0]
		if next.Seq <= rs[3].Seq {
			t.Errorf("seq after reopen %d, not above %d", next.Seq, rs[3].Seq)
		}
		owner := fx.lease(0, "o2", at(time.Hour))
		left := fx.claim(0, owner, 10)
		wantIDs(t, "live after the reopen", ids(left), rs[1].Envelope.ID, rs[2].Envelope.ID, rs[3].Envelope.ID, next.Envelope.ID)
		if left[0].Attempts != 2 || left[0].LastError != "503" {
			t.Errorf("retry bookkeeping after the reopen: %+v", left[0])
		}
		if len(fx.dead(stores.DeadQuery{})) != 1 {
			t.Error("the dead letter did not survive")
		}
		if st := fx.sessionStats(); st.Live != 4 || st.Routes[fx.route].Dead != 1 {
			t.Errorf("stats after the reopen = %+v", st)
		}
	})
}
