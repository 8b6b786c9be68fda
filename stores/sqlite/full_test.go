package sqlite

import (
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/gobridge/gobridge/message"
	"github.com/gobridge/gobridge/stores"
)

// fullStore opens a store capped at 64 pages (PRAGMA max_page_count on the
// one writer connection).
func fullStore(t *testing.T) *Store {
	t.Helper()
	s, err := Open(filepath.Join(t.TempDir(), "outbox.db"), Options{Sync: "normal"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if _, err := s.w.Exec(`PRAGMA max_page_count = 64`); err != nil {
		t.Fatal(err)
	}
	return s
}

// fillUntilFull writes batches of 10 records (500-byte payloads, made by
// rec) with write until it fails; the failure must be stores.ErrFull. It
// returns how many records the successful calls wrote.
func fillUntilFull(t *testing.T, write func(...stores.Record) error, rec func(id string) stores.Record) int {
	t.Helper()
	const batch = 10
	written := 0
	for i := 0; ; i++ {
		if i == 1000 {
			t.Fatal("the capped database never filled up")
		}
		recs := make([]stores.Record, batch)
		for j := range recs {
			recs[j] = rec(message.NewID())
		}
		err := write(recs...)
		if err == nil {
			written += batch
			continue
		}
		if !errors.Is(err, stores.ErrFull) {
			t.Fatalf("write on a full database = %v, want ErrFull", err)
		}
		return written
	}
}

var fullT0 = time.Unix(1_700_000_000, 0)

func fullRecord(id string) stores.Record {
	return stores.Record{Session: "s", Route: "r", Envelope: message.Envelope{
		ID: id, Topic: "t", Payload: make([]byte, 500), ReceivedAt: fullT0,
	}, CreatedAt: fullT0, NextAttemptAt: fullT0}
}

// TestStore_AppendReportsFullDisk: Append on a full database reports
// stores.ErrFull and the failed batch is absent as a whole, never partly
// stored.
func TestStore_AppendReportsFullDisk(t *testing.T) {
	s := fullStore(t)
	t0 := fullT0
	appended := fillUntilFull(t, func(recs ...stores.Record) error { return s.Append(t.Context(), recs...) }, fullRecord)
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
