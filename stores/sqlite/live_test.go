package sqlite

import (
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/gobridge/gobridge/message"
	"github.com/gobridge/gobridge/stores"
)

func liveTestStore(t *testing.T) (*Store, []stores.Record) {
	t.Helper()
	s, err := Open(filepath.Join(t.TempDir(), "outbox.db"), Options{Sync: "normal"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	t0 := time.Unix(1_700_000_000, 0)
	recs := make([]stores.Record, 3)
	for i := range recs {
		recs[i] = stores.Record{Session: "s", Route: "r", Envelope: message.Envelope{
			ID: message.NewID(), Topic: "t", Payload: []byte("p"), ReceivedAt: t0,
		}, CreatedAt: t0, NextAttemptAt: t0}
	}
	return s, recs
}

// TestStore_CompleteChecksEnvelopeID checks that a record whose Seq is
// another claimed record's is rejected as stale, and nothing of the call
// is completed.
func TestStore_CompleteChecksEnvelopeID(t *testing.T) {
	s, recs := liveTestStore(t)
	ctx := t.Context()
	if err := s.Append(ctx, recs...); err != nil {
		t.Fatal(err)
	}
	t0 := recs[0].NextAttemptAt
	got, err := s.Claim(ctx, stores.ClaimRequest{Session: "s", Token: 1, Limit: 3, Now: t0, Until: t0.Add(time.Minute)})
	if err != nil || len(got) != 3 {
		t.Fatalf("Claim = %d records, %v", len(got), err)
	}
	wrong := got[0]
	wrong.Seq = got[1].Seq
	if err := s.Complete(ctx, wrong, got[2]); !errors.Is(err, stores.ErrStaleToken) {
		t.Fatalf("Complete with another record's seq = %v, want ErrStaleToken", err)
	}
	if err := s.Complete(ctx, got...); err != nil {
		t.Fatalf("Complete after the rejected call: %v", err)
	}
}

// TestStore_AppendKeySpace checks that Append fails cleanly, persisting
// nothing, when the seqs would outgrow the live table's key.
func TestStore_AppendKeySpace(t *testing.T) {
	s, recs := liveTestStore(t)
	ctx := t.Context()
	if err := s.Append(ctx, recs[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := s.w.Exec(`UPDATE sqlite_sequence SET seq = ? WHERE name = 'outbox'`, maxSeq-1); err != nil {
		t.Fatal(err)
	}
	if err := s.Append(ctx, recs[1:]...); !errors.Is(err, errKeySpace) {
		t.Fatalf("Append past the key space = %v, want errKeySpace", err)
	}
	if st, err := s.Stats(ctx, "s"); err != nil || st.Pending != 1 {
		t.Fatalf("Stats = %+v, %v; want the one record appended before", st, err)
	}
}

// TestStore_AppendDuplicateKeepsCompletedDone checks that an Append whose
// statement skips a duplicate (so its new seqs are not known exactly) does
// not give a completed record a live row again.
func TestStore_AppendDuplicateKeepsCompletedDone(t *testing.T) {
	s, recs := liveTestStore(t)
	ctx := t.Context()
	t0 := recs[0].NextAttemptAt
	if err := s.Append(ctx, recs[0]); err != nil {
		t.Fatal(err)
	}
	got, err := s.Claim(ctx, stores.ClaimRequest{Session: "s", Token: 1, Limit: 10, Now: t0, Until: t0.Add(time.Minute)})
	if err != nil || len(got) != 1 {
		t.Fatalf("Claim = %d records, %v", len(got), err)
	}
	if err := s.Complete(ctx, got...); err != nil {
		t.Fatal(err)
	}
	// recs[0] is a done duplicate in the middle of a 4-row statement.
	if err := s.Append(ctx, recs[1], recs[0], recs[2], recs[1]); err != nil {
		t.Fatal(err)
	}
	got, err = s.Claim(ctx, stores.ClaimRequest{Session: "s", Token: 2, Limit: 10, Now: t0, Until: t0.Add(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Envelope.ID != recs[1].Envelope.ID || got[1].Envelope.ID != recs[2].Envelope.ID {
		t.Fatalf("Claim after the re-append = %v, want the two new records", ids(got))
	}
	if st, err := s.Stats(ctx, "s"); err != nil || st.Pending != 2 {
		t.Fatalf("Stats = %+v, %v; want 2 live", st, err)
	}
}
