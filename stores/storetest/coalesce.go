package storetest

import (
	"bytes"
	"testing"
	"time"

	"github.com/gobridge/gobridge/stores"
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

	// A record claimed and then released meets a second record of its key,
	// appended before or after the release: the one received later is the
	// only live record, due at the released one's next attempt.
	for _, tc := range []struct {
		name                          string
		claimedIsNewer, beforeRelease bool
	}{
		{"a released record is replaced, keeping its next attempt", false, false},
		{"a released record is superseded by a newer one appended while it was claimed", false, true},
		{"an older record appended while one was claimed is absorbed on release", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fx := s.setup(t)
			claimed, second := fx.rec(), fx.rec()
			claimed.CoalesceKey, second.CoalesceKey = "dev-1", "dev-1"
			want := &second
			if tc.claimedIsNewer {
				claimed.Envelope.ReceivedAt, want = at(time.Second), &claimed
			} else {
				second.Envelope.ReceivedAt = at(time.Second)
			}
			fx.append(claimed)
			c := fx.claimAt(1, 10, t0)
			wantIDs(t, "first claim", ids(c), claimed.Envelope.ID)
			if tc.beforeRelease {
				fx.append(second)
			}
			next := at(time.Minute)
			fx.release(c[0], next)
			if !tc.beforeRelease {
				fx.append(second)
			}
			fx.wantCoalesced(t, *want, next)
		})
	}

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

func (fx *fixture) release(r stores.Record, next time.Time) {
	fx.t.Helper()
	if err := fx.s.Release(fx.t.Context(), r, next, "refused"); err != nil {
		fx.t.Fatalf("Release: %v", err)
	}
}

// wantCoalesced checks that want is the only live record of the fixture's
// session, not due before next, and claimable (with its payload) at next.
func (fx *fixture) wantCoalesced(t *testing.T, want stores.Record, next time.Time) {
	t.Helper()
	if st := fx.stats(); st.Pending != 1 {
		t.Errorf("Stats.Pending = %d, want 1: one record per coalesce key", st.Pending)
	}
	if early := fx.claimAt(2, 10, next.Add(-time.Millisecond)); len(early) != 0 {
		t.Fatalf("claimed %v before the released record's next attempt: coalescing made a backed-off key due", ids(early))
	}
	got := fx.claimAt(3, 10, next)
	wantIDs(t, "claim at the next attempt", ids(got), want.Envelope.ID)
	if !bytes.Equal(got[0].Envelope.Payload, want.Envelope.Payload) {
		t.Errorf("payload %q, want the newest %q", got[0].Envelope.Payload, want.Envelope.Payload)
	}
	fx.complete(got...)
	wantIDs(t, "drain", fx.drain())
}
