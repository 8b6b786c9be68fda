package memory

import (
	"testing"
	"time"

	"github.com/gobridge/gobridge/message"
	"github.com/gobridge/gobridge/stores"
)

// TestStore_CompactsDoneRecords checks that the store forgets done records
// beyond DoneRetention, oldest first, and keeps absorbing re-appends of the
// newest ones.
func TestStore_CompactsDoneRecords(t *testing.T) {
	s := NewWithOptions(Options{DoneRetention: 10})
	ctx := t.Context()
	t0 := time.Unix(1_700_000_000, 0)
	var all []stores.Record
	for range 50 {
		r := stores.Record{Session: "s", Route: "r", Envelope: message.Envelope{ID: message.NewID(), ReceivedAt: t0},
			CreatedAt: t0, NextAttemptAt: t0}
		all = append(all, r)
		if err := s.Append(ctx, r); err != nil {
			t.Fatal(err)
		}
		got, err := s.Claim(ctx, stores.ClaimRequest{Session: "s", Token: 1, Limit: 1, Now: t0, Until: t0.Add(time.Minute)})
		if err != nil || len(got) != 1 {
			t.Fatalf("Claim = %v, %v", got, err)
		}
		if err := s.Complete(ctx, got...); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(s.byKey); n != 10 {
		t.Errorf("store holds %d records, want the 10 newest tombstones", n)
	}
	if err := s.Append(ctx, all[len(all)-1], all[0]); err != nil {
		t.Fatal(err)
	}
	st, err := s.Stats(ctx, "s")
	if err != nil || st.Pending != 1 {
		t.Fatalf("Stats = %+v, %v; want only the forgotten oldest record appended again", st, err)
	}
}
