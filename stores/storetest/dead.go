package storetest

import (
	"errors"
	"reflect"
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

	t.Run("a list without payloads is the letters but their payloads, with their sizes", func(t *testing.T) {
		fx := s.setup(t)
		rich := deadAt(fx, fx.route, time.Second)
		rich.Envelope.Headers, rich.Envelope.Key, rich.CausationID, rich.Raw = map[string]string{"h": "v"}, "k", "c", true
		rich.Attempts, rich.LastError, rich.ExpiresAt, rich.FirstAttemptAt = 3, "boom", at(time.Hour), at(0)
		empty := deadAt(fx, fx.route, 2*time.Second)
		empty.Envelope.Payload = nil
		big := fx.rec()
		big.Envelope.Payload = make([]byte, 3000)
		fx.append(rich, empty, stores.Truncate(big, "too large", at(3*time.Second)))
		settled := fx.append(fx.rec())[0] // dead-lettered by a settlement
		le := fx.lease(0, "owner", t0)
		fx.claim(0, le, 10)
		fx.settle(stores.DeadLetter, le.Token, "rejected", settled)

		full := fx.dead(stores.DeadQuery{})
		var lean []stores.Record
		for after := ""; ; { // in pages of one: the same cursors
			page, next, err := fx.s.Dead(t.Context(), stores.DeadQuery{Route: fx.route, After: after, Limit: 1, NoPayload: true})
			if err != nil {
				t.Fatal(err)
			}
			if lean = append(lean, page...); next == "" {
				break
			}
			after = next
		}
		wantIDs(t, "without payloads", ids(lean), ids(full)...)
		for i := range full {
			byID := fx.dead(stores.DeadQuery{ID: full[i].Envelope.ID, NoPayload: true})
			if full[i].PayloadLen != 0 || len(byID) != 1 {
				t.Fatalf("%s read whole has PayloadLen %d; by ID without payload: %d letters", full[i].Envelope.ID, full[i].PayloadLen, len(byID))
			}
			want := stores.WithoutPayload(full[i])
			for _, got := range []stores.Record{lean[i], byID[0]} {
				if got.Envelope.Payload != nil || got.PayloadBytes() != len(full[i].Envelope.Payload) || !reflect.DeepEqual(got, want) {
					t.Errorf("without payload:\n got %+v\nwant %+v", got, want)
				}
			}
		}
		if len(full) != 4 || full[0].PayloadBytes() != len(rich.Envelope.Payload) || full[1].PayloadBytes() != 0 ||
			full[2].PayloadBytes() != stores.TruncatedPayload {
			t.Errorf("letters read whole: %d, payload bytes %v", len(full), func() (n []int) {
				for i := range full {
					n = append(n, full[i].PayloadBytes())
				}
				return n
			}())
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
