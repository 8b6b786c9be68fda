package sqlite

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/gobridge/gobridge/message"
	"github.com/gobridge/gobridge/stores"
)

// TestStore_CompactsDoneRecords checks that done tombstones stay bounded
// by DoneRetention plus the compaction slack under steady traffic, that the
// newest ones still make re-appends no-ops, and that the count survives a
// reopen.
func TestStore_CompactsDoneRecords(t *testing.T) {
	path := filepath.Join(t.TempDir(), "outbox.db")
	s, err := Open(path, Options{Sync: "normal", DoneRetention: 50})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	ctx := t.Context()
	t0 := time.Unix(1_700_000_000, 0)
	var last []stores.Record
	for range 30 {
		recs := make([]stores.Record, 100)
		for i := range recs {
			recs[i] = stores.Record{Session: "s", Route: "r", Envelope: message.Envelope{
				ID: message.NewID(), Topic: "t", Payload: []byte("p"), ReceivedAt: t0,
			}, CreatedAt: t0, NextAttemptAt: t0}
		}
		if err := s.Append(ctx, recs...); err != nil {
			t.Fatal(err)
		}
		got, err := s.Claim(ctx, stores.ClaimRequest{Session: "s", Token: 1, Limit: 100, Now: t0, Until: t0.Add(time.Minute)})
		if err != nil || len(got) != 100 {
			t.Fatalf("Claim = %d records, %v", len(got), err)
		}
		if err := s.Complete(ctx, got...); err != nil {
			t.Fatal(err)
		}
		last = recs
	}
	rows := func() (n int) {
		t.Helper()
		if err := s.r.QueryRow(`SELECT (SELECT count(*) FROM completed) + (SELECT count(*) FROM outbox WHERE state='done')`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := rows(); n < 50 || n > 50+1000 {
		t.Fatalf("%d done tombstones after 3,000 completions, want between 50 and 1,050", n)
	}
	if got := s.doneCount.Load(); got != int64(rows()) {
		t.Errorf("done counter %d, rows %d", got, rows())
	}
	// The newest tombstones still absorb a redelivery.
	if err := s.Append(ctx, last[len(last)-1]); err != nil {
		t.Fatal(err)
	}
	if st, err := s.Stats(ctx, "s"); err != nil || st.Pending != 0 {
		t.Fatalf("Stats after re-appending a recent done record = %+v, %v; want 0 pending", st, err)
	}
	before := rows()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = Open(path, Options{Sync: "normal", DoneRetention: 50})
	if err != nil {
		t.Fatal(err)
	}
	if got := s.doneCount.Load(); got != int64(before) {
		t.Errorf("done counter after reopen %d, want %d", got, before)
	}
}
