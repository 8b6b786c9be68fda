package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/gobridge/gobridge/stores"
)

func (s suite) deadLetters(t *testing.T) {
	// deadAt returns a dead letter of route dying at d.
	deadAt := func(fx *fixture, route string, d time.Duration) stores.Record {
		r := fx.rec()
		r.Route = route
		r.State, r.DeadReason, r.DeadAt = stores.Dead, "reason "+route, at(d)
		return r
	}

	t.Run("list oldest first, by route, in pages", func(t *testing.T) {
		fx := s.setup(t)
		r2 := fx.route + "-2"
		a, b, c := deadAt(fx, fx.route, 2*time.Second), deadAt(fx, fx.route, time.Second), deadAt(fx, r2, 0)
		d := deadAt(fx, fx.route, 2*time.Second) // same DeadAt as a, appended later
		fx.append(a, b, c, d)
		wantIDs(t, "route", ids(fx.dead(stores.DeadQuery{})), b.Envelope.ID, a.Envelope.ID, d.Envelope.ID)
		wantIDs(t, "route 2", ids(fx.dead(stores.DeadQuery{Route: r2})), c.Envelope.ID)

		var pages [][]string
		after := ""
		for range 5 {
			got, next, err := fx.s.Dead(t.Context(), stores.DeadQuery{Route: fx.route, After: after, Limit: 2})
			if err != nil {
				t.Fatal(err)
			}
			pages = append(pages, ids(got))
			if next == "" {
				break
			}
			after = next
		}
		if len(pages) != 2 || len(pages[0]) != 2 || len(pages[1]) != 1 || pages[1][0] != d.Envelope.ID {
			t.Errorf("pages = %v", pages)
		}
		if _, _, err := fx.s.Dead(t.Context(), stores.DeadQuery{After: "garbage"}); !errors.Is(err, stores.ErrInvalid) {
			t.Errorf("a malformed cursor = %v, want ErrInvalid", err)
		}
	})

	t.Run("get one by envelope ID", func(t *testing.T) {
		fx := s.setup(t)
		a := deadAt(fx, fx.route, 0)
		a.Attempts, a.LastError, a.Truncated = 7, "boom", true
		fx.append(a, deadAt(fx, fx.route, 0))
		got := fx.dead(stores.DeadQuery{ID: a.Envelope.ID})
		if len(got) != 1 || got[0].Envelope.ID != a.Envelope.ID || got[0].Attempts != 7 ||
			got[0].LastError != "boom" || !got[0].Truncated || got[0].DeadReason != "reason "+fx.route {
			t.Fatalf("Dead by ID = %+v", got)
		}
		if _, _, err := fx.s.Dead(t.Context(), stores.DeadQuery{ID: "no-such-id"}); !errors.Is(err, stores.ErrNotFound) {
			t.Errorf("Dead of an unknown ID = %v, want ErrNotFound", err)
		}
	})

	t.Run("a truncated dead letter keeps a kilobyte and cannot be requeued", func(t *testing.T) {
		fx := s.setup(t)
		r := fx.rec()
		r.Envelope.Payload = make([]byte, 300_000)
		r.Envelope.Key, r.CoalesceKey = "k", "c"
		tr := stores.Truncate(r, "payload_too_large", at(time.Second))
		fx.append(tr)
		got := fx.dead(stores.DeadQuery{ID: r.Envelope.ID})[0]
		if len(got.Envelope.Payload) != stores.TruncatedPayload || !got.Truncated || got.Envelope.Key != "" {
			t.Errorf("truncated dead letter: %d bytes, truncated %v, key %q", len(got.Envelope.Payload), got.Truncated, got.Envelope.Key)
		}
		if _, err := stores.Requeued(got, fx.session, 1, at(time.Hour)); !errors.Is(err, stores.ErrInvalid) {
			t.Errorf("Requeued of a truncated dead letter = %v, want ErrInvalid", err)
		}
	})
}
