package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/gobridge/gobridge/stores"
)

// appendDead checks AppendDead: records that go straight to the dead
// letters without ever being live.
func (s suite) appendDead(t *testing.T) {
	t.Run("records go straight to the dead letters with their bookkeeping", func(t *testing.T) {
		fx := s.setup(t)
		given, stamped := fx.rec(), fx.rec()
		given.DeadAt, given.DeadReason = at(time.Minute), "processor: bad json"
		given.Attempts, given.LastError = 1, "unexpected EOF"
		given.Envelope.Headers = map[string]string{"h": "v"}
		stamped.DeadReason = "permanent: 400"
		stamped.CreatedAt = time.Time{}
		before := time.Now()
		fx.appendDead(given, stamped)
		after := time.Now()

		g := fx.getDead(given.Envelope.ID)
		if g.State != stores.Dead || g.DeadReason != given.DeadReason || g.Attempts != 1 ||
			g.LastError != given.LastError || g.Session != fx.session || g.Route != fx.route ||
			string(g.Envelope.Payload) != string(given.Envelope.Payload) || g.Envelope.Headers["h"] != "v" || g.Seq == 0 {
			t.Errorf("dead letter = %+v", g)
		}
		wantTime(t, "DeadAt (given)", g.DeadAt, given.DeadAt)
		wantTime(t, "CreatedAt (given)", g.CreatedAt, t0)

		d := fx.getDead(stamped.Envelope.ID)
		if d.State != stores.Dead || d.DeadReason != stamped.DeadReason || d.Attempts != 0 || d.Seq == 0 || d.Seq == g.Seq {
			t.Errorf("dead letter = %+v", d)
		}
		for what, got := range map[string]time.Time{"DeadAt": d.DeadAt, "CreatedAt": d.CreatedAt} {
			if got.Before(before.Truncate(time.Millisecond)) || got.After(after) {
				t.Errorf("%s (defaulted) = %v, want the wall clock between %v and %v", what, got, before, after)
			}
		}
		wantIDs(t, "dead letters", fx.listAll(stores.DeadFilter{Route: fx.route})[0],
			given.Envelope.ID, stamped.Envelope.ID)
		wantIDs(t, "claim", fx.drain())
		if st := fx.stats(); st.Pending != 0 || !st.OldestCreatedAt.IsZero() {
			t.Errorf("Stats = %+v, want nothing pending", st)
		}
	})

	t.Run("is idempotent and leaves existing records as they are", func(t *testing.T) {
		fx := s.setup(t)
		dead := fx.rec()
		dead.DeadReason, dead.DeadAt = "first", at(time.Minute)
		fx.appendDead(dead)
		again := dead
		again.DeadReason, again.DeadAt, again.Attempts = "second", at(time.Hour), 5
		fx.appendDead(again)
		if d := fx.getDead(dead.Envelope.ID); d.DeadReason != "first" || d.Attempts != 0 || !d.DeadAt.Equal(dead.DeadAt) {
			t.Errorf("dead letter after a second AppendDead = %+v, want the first one", d)
		}

		pending, fresh := fx.rec(), fx.rec()
		fx.append(pending)
		pending.DeadReason, fresh.DeadReason = "x", "y"
		fx.appendDead(pending, fresh) // a batch mixing an existing and a new key
		if _, err := fx.s.GetDead(t.Context(), pending.Envelope.ID); !errors.Is(err, stores.ErrNotFound) {
			t.Errorf("GetDead(pending) = %v, want ErrNotFound", err)
		}
		if d := fx.getDead(fresh.Envelope.ID); d.DeadReason != "y" {
			t.Errorf("new dead letter of a mixed batch = %+v", d)
		}
		if st := fx.stats(); st.Pending != 1 {
			t.Errorf("Stats.Pending = %d, want 1 (the pending record)", st.Pending)
		}
		wantIDs(t, "claim", fx.drain(), pending.Envelope.ID)
		wantIDs(t, "dead letters", fx.listAll(stores.DeadFilter{Route: fx.route})[0],
			dead.Envelope.ID, fresh.Envelope.ID)

		if !fx.f.ForgetsDone {
			done := fx.rec()
			fx.append(done)
			fx.complete(fx.claimAt(2, 1, t0)...)
			done.DeadReason = "z"
			fx.appendDead(done)
			if _, err := fx.s.GetDead(t.Context(), done.Envelope.ID); !errors.Is(err, stores.ErrNotFound) {
				t.Errorf("GetDead(done) = %v, want ErrNotFound", err)
			}
		}
	})

	t.Run("an invalid record fails the whole batch", func(t *testing.T) {
		fx := s.setup(t)
		ok := fx.rec()
		ok.DeadReason = "x"
		noReason := fx.rec()
		noSession := fx.rec()
		noSession.Session, noSession.DeadReason = "", "x"
		for _, bad := range []stores.Record{noReason, noSession} {
			if err := fx.s.AppendDead(t.Context(), ok, bad); !errors.Is(err, stores.ErrInvalid) {
				t.Errorf("AppendDead with %+v = %v, want ErrInvalid", bad, err)
			}
		}
		if _, err := fx.s.GetDead(t.Context(), ok.Envelope.ID); !errors.Is(err, stores.ErrNotFound) {
			t.Errorf("GetDead of the valid record of a failed batch = %v, want ErrNotFound", err)
		}
		if err := fx.s.AppendDead(t.Context()); err != nil {
			t.Errorf("AppendDead() = %v, want nil", err)
		}
	})

	t.Run("requeue makes it claimable and drop deletes it", func(t *testing.T) {
		fx := s.setup(t)
		a, b := fx.rec(), fx.rec()
		a.Partition, a.DeadReason, a.Attempts = 2, "processor", 1
		b.DeadReason = "permanent"
		fx.appendDead(a, b)
		now := at(time.Hour)
		n, err := fx.s.Requeue(t.Context(), a.Envelope.ID, now)
		if err != nil {
			t.Fatal(err)
		}
		if n.Session != fx.session || n.Partition != 2 || n.CausationID != a.Envelope.ID || n.State != stores.Pending {
			t.Errorf("requeued = %+v", n)
		}
		if st := fx.stats(); st.Pending != 1 {
			t.Errorf("Stats.Pending after requeue = %d, want 1", st.Pending)
		}
		c := fx.claimPart(2, 1, 10, now)
		wantIDs(t, "claim", ids(c), n.Envelope.ID)
		if c[0].Attempts != 1 || string(c[0].Envelope.Payload) != string(a.Envelope.Payload) {
			t.Errorf("claimed = %+v", c[0])
		}
		if err := fx.s.DropDead(t.Context(), b.Envelope.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := fx.s.GetDead(t.Context(), b.Envelope.ID); !errors.Is(err, stores.ErrNotFound) {
			t.Errorf("GetDead after drop = %v, want ErrNotFound", err)
		}
		wantIDs(t, "dead letters", fx.listAll(stores.DeadFilter{Route: fx.route})[0])
	})

	t.Run("the inspector counts them as dead", func(t *testing.T) {
		fx := s.setup(t)
		in, ok := fx.s.(stores.Inspector)
		if !ok {
			t.Skip("backend does not implement stores.Inspector")
		}
		rs := fx.recs(3)
		for i := range rs {
			rs[i].DeadReason = "x"
		}
		fx.appendDead(rs...)
		a := inspectRoute(t, in, fx.session, fx.route, t0)
		if a.Dead != 3 || a.Pending != 0 || a.Claimed != 0 || a.Due != 0 || !a.OldestPendingAt.IsZero() {
			t.Errorf("route = %+v, want dead 3 and nothing live", a)
		}
		if err := fx.s.DropDead(t.Context(), rs[0].Envelope.ID); err != nil {
			t.Fatal(err)
		}
		if a := inspectRoute(t, in, fx.session, fx.route, t0); a.Dead != 2 {
			t.Errorf("after drop: route = %+v, want dead 2", a)
		}
	})
}

func (fx *fixture) appendDead(recs ...stores.Record) {
	fx.t.Helper()
	if err := fx.s.AppendDead(fx.t.Context(), recs...); err != nil {
		fx.t.Fatalf("AppendDead: %v", err)
	}
}

func (fx *fixture) getDead(id string) stores.Record {
	fx.t.Helper()
	d, err := fx.s.GetDead(fx.t.Context(), id)
	if err != nil {
		fx.t.Fatalf("GetDead(%s): %v", id, err)
	}
	return d
}
