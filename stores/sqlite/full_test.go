package sqlite

import (
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/gobridge/gobridge/delivery"
	"github.com/gobridge/gobridge/stores"
)

// TestStore_AppendReportsFullDisk caps the database size (PRAGMA
// max_page_count on the one writer connection) so that Append eventually
// hits SQLITE_FULL: the error must reach the caller as stores.ErrFull and the
// failed batch must be absent as a whole, never partly stored.
func TestStore_AppendReportsFullDisk(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "outbox.db"), Options{Sync: "normal"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if _, err := s.w.Exec(`PRAGMA max_page_count = 64`); err != nil {
		t.Fatal(err)
	}
	t0 := time.Unix(1_700_000_000, 0)
	const batch = 10
	payload := make([]byte, 500)
	appended := 0
	for i := 0; ; i++ {
		if i == 1000 {
			t.Fatal("Append never failed with a capped database")
		}
		recs := make([]stores.Record, batch)
		for j := range recs {
			recs[j] = stores.Record{Session: "s", Route: "r", Envelope: delivery.Envelope{
				ID: delivery.NewID(), Topic: "t", Payload: payload, ReceivedAt: t0,
			}, CreatedAt: t0, NextAttemptAt: t0}
		}
		err := s.Append(t.Context(), recs...)
		if err == nil {
			appended += batch
			continue
		}
		if !errors.Is(err, stores.ErrFull) {
			t.Fatalf("Append on a full database = %v, want ErrFull", err)
		}
		break
	}
	st, err := s.Stats(t.Context(), "s")
	if err != nil {
		t.Fatal(err)
	}
	if st.Pending != appended {
		t.Errorf("Stats.Pending = %d, want %d (the batches whose Append returned nil)", st.Pending, appended)
	}
	var rows int
	if err := s.r.QueryRow(`SELECT count(*) FROM outbox`).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != appended {
		t.Errorf("outbox has %d rows, want %d", rows, appended)
	}
	got, err := s.Claim(t.Context(), stores.ClaimRequest{Session: "s", Token: 1, Limit: 100_000, Now: t0, Until: t0.Add(time.Minute)})
	if err != nil && !errors.Is(err, stores.ErrFull) {
		t.Fatal(err)
	}
	if err == nil && len(got) != appended {
		t.Errorf("claimed %d, want %d", len(got), appended)
	}
}
