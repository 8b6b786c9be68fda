package storetest

import (
	"context"
	"errors"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/gobridge/gobridge/stores"
)

func (s suite) append(t *testing.T) {
	t.Run("keeps every field", func(t *testing.T) {
		fx := s.setup(t)
		r := fx.rec()
		r.Partition = 0
		r.Envelope.Headers = map[string]string{"a": "1", "b": "2"}
		r.Envelope.Key = "k1"
		r.Envelope.QoS = 2
		r.Envelope.ReceivedAt = at(-time.Second)
		r.CreatedAt = at(2 * time.Millisecond)
		r.ExpiresAt = at(time.Hour)
		r.CausationID = "cause-1"
		fx.append(r)
		got := fx.claimAt(7, 10, t0)
		if len(got) != 1 {
			t.Fatalf("claimed %d records, want 1", len(got))
		}
		g := got[0]
		if g.Session != r.Session || g.Route != r.Route || g.Partition != r.Partition || g.CausationID != r.CausationID {
			t.Errorf("identity = %s/%s/%d/%q, want %s/%s/%d/%q", g.Session, g.Route, g.Partition, g.CausationID,
				r.Session, r.Route, r.Partition, r.CausationID)
		}
		e, w := g.Envelope, r.Envelope
		if e.ID != w.ID || e.Topic != w.Topic || string(e.Payload) != string(w.Payload) || e.QoS != w.QoS || e.Key != w.Key ||
			!maps.Equal(e.Headers, w.Headers) {
			t.Errorf("envelope = %+v, want %+v", e, w)
		}
		wantTime(t, "ReceivedAt", e.ReceivedAt, w.ReceivedAt)
		wantTime(t, "CreatedAt", g.CreatedAt, r.CreatedAt)
		wantTime(t, "ExpiresAt", g.ExpiresAt, r.ExpiresAt)
		wantTime(t, "NextAttemptAt", g.NextAttemptAt, r.NextAttemptAt)
		if g.Seq <= 0 {
			t.Errorf("Seq = %d, want > 0", g.Seq)
		}
	})

	t.Run("assigns increasing Seq in persist order", func(t *testing.T) {
		fx := s.setup(t)
		a := fx.recs(3)
		fx.append(a...)
		b := fx.recs(2)
		fx.append(b...)
		got := fx.claimAt(1, 10, t0)
		wantIDs(t, "claim", ids(got), ids(append(a, b...))...)
		for i := 1; i < len(got); i++ {
			if got[i].Seq <= got[i-1].Seq {
				t.Errorf("Seq %d after %d: not increasing", got[i].Seq, got[i-1].Seq)
			}
		}
	})

	t.Run("stamps CreatedAt when zero", func(t *testing.T) {
		fx := s.setup(t)
		r := fx.rec()
		r.CreatedAt = time.Time{}
		fx.append(r)
		got := fx.claimAt(1, 1, t0)
		if len(got) != 1 || got[0].CreatedAt.IsZero() {
			t.Fatalf("claimed %+v, want one record with CreatedAt set", got)
		}
		if st := fx.stats(); st.OldestCreatedAt.IsZero() {
			t.Errorf("Stats.OldestCreatedAt is zero")
		}
	})

	t.Run("re-append is a no-op", func(t *testing.T) {
		fx := s.setup(t)
		r := fx.rec()
		fx.append(r)
		again := r
		again.Envelope.Payload = []byte("changed")
		fx.append(again)
		got := fx.claimAt(1, 10, t0)
		wantIDs(t, "claim", ids(got), r.Envelope.ID)
		if string(got[0].Envelope.Payload) != string(r.Envelope.Payload) {
			t.Errorf("payload = %q, want the first append's %q", got[0].Envelope.Payload, r.Envelope.Payload)
		}
		fx.append(r) // while claimed
		if st := fx.stats(); st.Pending != 1 {
			t.Errorf("Stats.Pending = %d, want 1", st.Pending)
		}
	})

	t.Run("re-append after done is a no-op", func(t *testing.T) {
		if s.f.ForgetsDone {
			t.Skip("backend forgets done records")
		}
		fx := s.setup(t)
		r := fx.rec()
		fx.append(r)
		fx.complete(fx.claimAt(1, 1, t0)...)
		fx.append(r)
		wantIDs(t, "claim after re-append", fx.drain())
		if st := fx.stats(); st.Pending != 0 {
			t.Errorf("Stats.Pending = %d, want 0", st.Pending)
		}
	})

	t.Run("re-append after dead-letter is a no-op", func(t *testing.T) {
		fx := s.setup(t)
		r := fx.rec()
		fx.append(r)
		c := fx.claimAt(1, 1, t0)
		if err := fx.s.DeadLetter(t.Context(), c[0], "poison"); err != nil {
			t.Fatal(err)
		}
		fx.append(r)
		wantIDs(t, "claim after re-append", fx.drain())
		d, err := fx.s.GetDead(t.Context(), r.Envelope.ID)
		if err != nil || d.State != stores.Dead {
			t.Fatalf("GetDead = %+v, %v; want the dead letter", d, err)
		}
	})

	t.Run("batch with a duplicate appends each record once", func(t *testing.T) {
		fx := s.setup(t)
		old := fx.rec()
		fx.append(old)
		a, b := fx.rec(), fx.rec()
		fx.append(a, old, b, a)
		wantIDs(t, "claim", fx.drain(), old.Envelope.ID, a.Envelope.ID, b.Envelope.ID)
	})

	t.Run("invalid record rejects the whole batch", func(t *testing.T) {
		fx := s.setup(t)
		good, bad := fx.rec(), fx.rec()
		bad.Envelope.ID = ""
		err := fx.s.Append(t.Context(), good, bad)
		if !errors.Is(err, stores.ErrInvalid) {
			t.Fatalf("Append = %v, want ErrInvalid", err)
		}
		wantIDs(t, "claim", fx.drain())
		if st := fx.stats(); st.Pending != 0 {
			t.Errorf("Stats.Pending = %d, want 0", st.Pending)
		}
	})

	t.Run("a cancelled context stores nothing", func(t *testing.T) {
		fx := s.setup(t)
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		if err := fx.s.Append(ctx, fx.recs(3)...); err == nil {
			t.Fatal("Append with a cancelled context returned nil")
		}
		if st := fx.stats(); st.Pending != 0 {
			t.Errorf("Stats.Pending = %d, want 0", st.Pending)
		}
	})

	t.Run("same ID in another route is another record", func(t *testing.T) {
		fx := s.setup(t)
		a := fx.rec()
		b := a
		b.Route = fx.route + "-other"
		fx.append(a, b)
		got := fx.claimAt(1, 10, t0)
		if len(got) != 2 {
			t.Fatalf("claimed %d records, want 2", len(got))
		}
		routes := []string{got[0].Route, got[1].Route}
		slices.Sort(routes)
		if routes[0] != a.Route || routes[1] != b.Route {
			t.Fatalf("claimed %d records in routes %v, want one per route", len(got), routes)
		}
	})
}
