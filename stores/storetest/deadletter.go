package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/gobridge/gobridge/stores"
)

// kill claims r (alone, with token 1 at now) and dead-letters it at deadAt.
func (fx *fixture) kill(r stores.Record, deadAt time.Time, reason string) stores.Record {
	fx.t.Helper()
	c := fx.claimAt(1, 1, r.NextAttemptAt)
	if len(c) != 1 || c[0].Envelope.ID != r.Envelope.ID {
		fx.t.Fatalf("claim for dead-lettering: got %v, want %s", ids(c), r.Envelope.ID)
	}
	c[0].DeadAt = deadAt
	if err := fx.s.DeadLetter(fx.t.Context(), c[0], reason); err != nil {
		fx.t.Fatalf("DeadLetter: %v", err)
	}
	return c[0]
}

func (fx *fixture) listAll(f stores.DeadFilter) (pages [][]string) {
	fx.t.Helper()
	for range 100 {
		recs, next, err := fx.s.ListDead(fx.t.Context(), f)
		if err != nil {
			fx.t.Fatalf("ListDead: %v", err)
		}
		pages = append(pages, ids(recs))
		if next == "" {
			return pages
		}
		f.After = next
	}
	fx.t.Fatalf("ListDead did not end after 100 pages")
	return nil
}

func (s suite) deadLetters(t *testing.T) {
	t.Run("dead letter keeps its bookkeeping and leaves the backlog", func(t *testing.T) {
		fx := s.setup(t)
		r := fx.rec()
		r.Envelope.Key = "k"
		fx.append(r)
		c := fx.claimAt(1, 1, t0)
		if err := fx.s.Release(t.Context(), c[0], at(time.Second), "503"); err != nil {
			t.Fatal(err)
		}
		r.NextAttemptAt = at(time.Second)
		fx.kill(r, at(time.Minute), "max attempts")
		d, err := fx.s.GetDead(t.Context(), r.Envelope.ID)
		if err != nil {
			t.Fatal(err)
		}
		if d.State != stores.Dead || d.DeadReason != "max attempts" || d.Attempts != 2 || d.LastError != "503" ||
			d.Route != r.Route || d.Session != r.Session || string(d.Envelope.Payload) != string(r.Envelope.Payload) {
			t.Errorf("dead letter = %+v", d)
		}
		wantTime(t, "DeadAt", d.DeadAt, at(time.Minute))
		wantTime(t, "FirstAttemptAt", d.FirstAttemptAt, t0)
		wantIDs(t, "drain", fx.drain())
		if st := fx.stats(); st.Pending != 0 {
			t.Errorf("Stats.Pending = %d, want 0", st.Pending)
		}
	})

	t.Run("list is oldest first, paged, and filtered by route", func(t *testing.T) {
		fx := s.setup(t)
		rs := fx.recs(5)
		other := fx.rec()
		other.Route = fx.route + "-other"
		fx.append(append(rs, other)...)
		c := fx.claimAt(1, 10, t0)
		if len(c) != 6 {
			t.Fatalf("claimed %d, want 6", len(c))
		}
		// Dead-letter in reverse persist order so that DeadAt order and
		// Seq order differ; rs[3] and rs[4] die at the same time.
		deadAt := []time.Duration{5, 4, 3, 2, 2, 1}
		for i := len(c) - 1; i >= 0; i-- {
			c[i].DeadAt = at(deadAt[i] * time.Second)
			if err := fx.s.DeadLetter(t.Context(), c[i], "x"); err != nil {
				t.Fatal(err)
			}
		}
		want := [][]string{
			{rs[3].Envelope.ID, rs[4].Envelope.ID},
			{rs[2].Envelope.ID, rs[1].Envelope.ID},
			{rs[0].Envelope.ID},
		}
		got := fx.listAll(stores.DeadFilter{Route: fx.route, Limit: 2})
		if len(got) != len(want) {
			t.Fatalf("pages = %v, want %v", got, want)
		}
		for i := range want {
			wantIDs(t, "page", got[i], want[i]...)
		}
		wantIDs(t, "other route", fx.listAll(stores.DeadFilter{Route: other.Route})[0], other.Envelope.ID)
	})

	t.Run("unknown dead letters are not found", func(t *testing.T) {
		fx := s.setup(t)
		live := fx.rec()
		fx.append(live)
		for _, id := range []string{"no-such-id", live.Envelope.ID} {
			if _, err := fx.s.GetDead(t.Context(), id); !errors.Is(err, stores.ErrNotFound) {
				t.Errorf("GetDead(%s) = %v, want ErrNotFound", id, err)
			}
			if _, err := fx.s.Requeue(t.Context(), id, t0); !errors.Is(err, stores.ErrNotFound) {
				t.Errorf("Requeue(%s) = %v, want ErrNotFound", id, err)
			}
			if err := fx.s.DropDead(t.Context(), id); !errors.Is(err, stores.ErrNotFound) {
				t.Errorf("DropDead(%s) = %v, want ErrNotFound", id, err)
			}
		}
	})

	t.Run("requeue makes a new pending record caused by the dead one", func(t *testing.T) {
		fx := s.setup(t)
		r := fx.rec()
		r.ExpiresAt = at(time.Hour)
		fx.append(r)
		fx.kill(r, at(time.Minute), "poison")
		now := at(10 * time.Minute)
		n, err := fx.s.Requeue(t.Context(), r.Envelope.ID, now)
		if err != nil {
			t.Fatal(err)
		}
		if n.Envelope.ID == "" || n.Envelope.ID == r.Envelope.ID || n.CausationID != r.Envelope.ID {
			t.Errorf("ID, CausationID = %q, %q; want a new ID caused by %q", n.Envelope.ID, n.CausationID, r.Envelope.ID)
		}
		if n.State != stores.Pending || n.Attempts != 0 || !n.FirstAttemptAt.IsZero() || n.DeadReason != "" {
			t.Errorf("requeued = %+v, want pending with attempts reset", n)
		}
		if _, err := fx.s.GetDead(t.Context(), r.Envelope.ID); !errors.Is(err, stores.ErrNotFound) {
			t.Errorf("GetDead(old) = %v, want ErrNotFound", err)
		}
		wantIDs(t, "claim before now", ids(fx.claimAt(1, 10, now.Add(-time.Millisecond))))
		c := fx.claimAt(2, 10, now)
		wantIDs(t, "claim", ids(c), n.Envelope.ID)
		g := c[0]
		if g.CausationID != r.Envelope.ID || string(g.Envelope.Payload) != string(r.Envelope.Payload) || g.Attempts != 1 || g.Seq != n.Seq {
			t.Errorf("claimed = %+v", g)
		}
		wantTime(t, "FirstAttemptAt", g.FirstAttemptAt, now)
		wantTime(t, "ExpiresAt (time to live kept)", g.ExpiresAt, r.ExpiresAt.Add(now.Sub(r.CreatedAt)))
		wantIDs(t, "dead letters", fx.listAll(stores.DeadFilter{Route: fx.route})[0])
	})

	t.Run("drop deletes the dead letter", func(t *testing.T) {
		fx := s.setup(t)
		a, b := fx.rec(), fx.rec()
		fx.append(a, b)
		fx.kill(a, t0, "x")
		fx.kill(b, t0, "x")
		if err := fx.s.DropDead(t.Context(), a.Envelope.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := fx.s.GetDead(t.Context(), a.Envelope.ID); !errors.Is(err, stores.ErrNotFound) {
			t.Errorf("GetDead after drop = %v, want ErrNotFound", err)
		}
		if err := fx.s.DropDead(t.Context(), a.Envelope.ID); !errors.Is(err, stores.ErrNotFound) {
			t.Errorf("second DropDead = %v, want ErrNotFound", err)
		}
		wantIDs(t, "dead letters", fx.listAll(stores.DeadFilter{Route: fx.route})[0], b.Envelope.ID)
	})
}
