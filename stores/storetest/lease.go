package storetest

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/gobridge/gobridge/stores"
)

func (s suite) leases(t *testing.T) {
	f := s.f
	setup := func(t *testing.T) (stores.Store, string) {
		t.Helper()
		t.Parallel()
		return s.newStore(t), "lease-" + unique() + "/"
	}
	const ttl = 10 * time.Second

	acquire := func(t *testing.T, l stores.Store, name, owner string, now time.Time) stores.Lease {
		t.Helper()
		le, err := l.Acquire(t.Context(), name, owner, ttl, now)
		if err != nil {
			t.Fatalf("Acquire(%s, %s): %v", name, owner, err)
		}
		return le
	}

	t.Run("acquire returns a token and deadline", func(t *testing.T) {
		l, p := setup(t)
		le := acquire(t, l, p+"a", "o1", t0)
		if le.Token <= 0 || le.Name != p+"a" || le.Owner != "o1" {
			t.Errorf("lease = %+v", le)
		}
		wantTime(t, "Until", le.Until, t0.Add(ttl))
	})

	// The holder checks whether its lease still runs against Until: with
	// now's monotonic reading kept (time.Now's), a wall-clock step does
	// not stretch or shorten the lease in the holder's eyes.
	t.Run("until keeps the monotonic reading of now", func(t *testing.T) {
		l, p := setup(t)
		le := acquire(t, l, p+"a", "o1", time.Now())
		renewed, err := l.Renew(t.Context(), le, ttl, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		for _, u := range []time.Time{le.Until, renewed.Until} {
			if u.Round(0) == u { // Round(0) strips only the monotonic reading
				t.Errorf("Until %v carries no monotonic reading", u)
			}
		}
	})

	t.Run("a held lease cannot be taken until it lapses", func(t *testing.T) {
		l, p := setup(t)
		old := acquire(t, l, p+"a", "o1", t0)
		if _, err := l.Acquire(t.Context(), p+"a", "o2", ttl, t0.Add(ttl-time.Millisecond)); !errors.Is(err, stores.ErrLeaseHeld) {
			t.Fatalf("Acquire of a held lease = %v, want ErrLeaseHeld", err)
		}
		taken := acquire(t, l, p+"a", "o2", t0.Add(ttl))
		if taken.Token <= old.Token {
			t.Errorf("takeover token %d not above %d", taken.Token, old.Token)
		}
		if _, err := l.Renew(t.Context(), old, ttl, t0.Add(ttl)); !errors.Is(err, stores.ErrLeaseLost) {
			t.Errorf("stale Renew = %v, want ErrLeaseLost", err)
		}
		if err := l.Release(t.Context(), old); !errors.Is(err, stores.ErrLeaseLost) {
			t.Errorf("stale Release = %v, want ErrLeaseLost", err)
		}
		if _, err := l.Acquire(t.Context(), p+"a", "o1", ttl, t0.Add(ttl)); !errors.Is(err, stores.ErrLeaseHeld) {
			t.Errorf("Acquire by the old owner = %v, want ErrLeaseHeld", err)
		}
	})

	t.Run("renew extends and keeps the token", func(t *testing.T) {
		l, p := setup(t)
		le := acquire(t, l, p+"a", "o1", t0)
		r, err := l.Renew(t.Context(), le, ttl, t0.Add(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if r.Token != le.Token {
			t.Errorf("renewed token %d, want %d", r.Token, le.Token)
		}
		wantTime(t, "Until", r.Until, t0.Add(15*time.Second))
		if _, err := l.Acquire(t.Context(), p+"a", "o2", ttl, t0.Add(ttl)); !errors.Is(err, stores.ErrLeaseHeld) {
			t.Errorf("Acquire within the renewed lease = %v, want ErrLeaseHeld", err)
		}
	})

	t.Run("re-acquire by the holder gives a larger token", func(t *testing.T) {
		l, p := setup(t)
		a := acquire(t, l, p+"a", "o1", t0)
		b := acquire(t, l, p+"a", "o1", t0.Add(time.Second))
		if b.Token <= a.Token {
			t.Errorf("token %d not above %d", b.Token, a.Token)
		}
		if _, err := l.Renew(t.Context(), a, ttl, t0); !errors.Is(err, stores.ErrLeaseLost) {
			t.Errorf("Renew with the superseded token = %v, want ErrLeaseLost", err)
		}
	})

	t.Run("release lets another owner in at once with a larger token", func(t *testing.T) {
		l, p := setup(t)
		a := acquire(t, l, p+"a", "o1", t0)
		if err := l.Release(t.Context(), a); err != nil {
			t.Fatal(err)
		}
		if err := l.Release(t.Context(), a); !errors.Is(err, stores.ErrLeaseLost) {
			t.Errorf("second Release = %v, want ErrLeaseLost", err)
		}
		b := acquire(t, l, p+"a", "o2", t0)
		if b.Token <= a.Token {
			t.Errorf("token %d not above %d", b.Token, a.Token)
		}
	})

	t.Run("list returns live leases by prefix", func(t *testing.T) {
		l, p := setup(t)
		acquire(t, l, p+"s/0", "o1", t0)
		acquire(t, l, p+"s/1", "o2", t0)
		acquire(t, l, p+"t/0", "o1", t0)
		if _, err := l.Acquire(t.Context(), p+"s/2", "o1", time.Second, t0); err != nil {
			t.Fatal(err)
		}
		got, err := l.List(t.Context(), p+"s/", t0.Add(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, le := range got {
			names = append(names, le.Name)
		}
		slices.Sort(names)
		if want := []string{p + "s/0", p + "s/1"}; !slices.Equal(names, want) {
			t.Errorf("List = %v, want %v", names, want)
		}
	})

	// Session adoption (bridge) finds the leases of dead holders this way.
	t.Run("list at the epoch returns lapsed leases but not released ones", func(t *testing.T) {
		l, p := setup(t)
		if _, err := l.Acquire(t.Context(), p+"lapsed", "o1", time.Second, t0); err != nil {
			t.Fatal(err)
		}
		if err := l.Release(t.Context(), acquire(t, l, p+"released", "o2", t0)); err != nil {
			t.Fatal(err)
		}
		got, err := l.List(t.Context(), p, time.Unix(0, 0))
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 1 || got[0].Name != p+"lapsed" || got[0].Owner != "o1" {
			t.Errorf("List at the epoch = %+v, want only %slapsed", got, p)
		}
	})

	if f.Reopen != nil {
		t.Run("tokens grow across a reopen", func(t *testing.T) {
			l, p := setup(t)
			a := acquire(t, l, p+"a", "o1", t0)
			b := acquire(t, l, p+"b", "o1", t0)
			if err := l.Release(t.Context(), b); err != nil {
				t.Fatal(err)
			}
			l = f.Reopen(t, l)
			_, err := l.Acquire(t.Context(), p+"a", "o2", ttl, t0)
			switch {
			case f.ReopenReleasesLeases && err != nil:
				t.Errorf("Acquire of a lease held before the reopen = %v, want it free", err)
			case !f.ReopenReleasesLeases && !errors.Is(err, stores.ErrLeaseHeld):
				t.Errorf("Acquire of a lease held before the reopen = %v, want ErrLeaseHeld", err)
			}
			c := acquire(t, l, p+"b", "o2", t0)
			if c.Token <= b.Token || c.Token <= a.Token {
				t.Errorf("token after reopen %d, want above %d and %d", c.Token, a.Token, b.Token)
			}
		})
	}
}
