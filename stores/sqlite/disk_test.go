package sqlite

import (
	"database/sql"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gobridge/gobridge/message"
	"github.com/gobridge/gobridge/stores"
)

// appendN appends n live records of session "s" with payloads of size
// bytes, in Writes of at most 1,000, and returns them.
func appendN(t *testing.T, s *Store, n, size int) []stores.Record {
	t.Helper()
	var out []stores.Record
	for n > 0 {
		b := stores.Batch{Append: make([]stores.Record, min(n, 1000))}
		for i := range b.Append {
			b.Append[i] = stores.Record{Session: "s", Route: "r", Envelope: message.Envelope{
				ID: message.NewID(), Topic: "t", Payload: make([]byte, size)}}
		}
		if err := s.Write(t.Context(), &b); err != nil {
			t.Fatal(err)
		}
		out, n = append(out, b.Append...), n-len(b.Append)
	}
	return out
}

// A read transaction held by another process (an operator's sqlite3 shell,
// a backup) starves the checkpoints, and the -wal file grows with every
// commit meanwhile. Once the reader is gone the next checkpoint empties the
// WAL and the file is cut back to journalLimit: without it, it stays at its
// peak (440 MiB after 100 MB of traffic, measured) until the store closes.
func TestStore_WALShrinksOnceAStarvingReaderIsGone(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 64 MiB")
	}
	s, err := Open(filepath.Join(t.TempDir(), "outbox.db"), Options{Sync: "normal"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	appendN(t, s, 1, 0)
	ro, err := sql.Open("sqlite", "file:"+s.Path()+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ro.Close() })
	reader, err := ro.Begin()
	if err != nil {
		t.Fatal(err)
	}
	var n int
	if err := reader.QueryRow(`SELECT count(*) FROM outbox`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	appendN(t, s, 1024, 64<<10)
	peak := walSize(t, s)
	if peak < 64<<20 {
		t.Fatalf("the WAL is %d bytes with a reader holding it back, want over 64 MiB (the test measures nothing)", peak)
	}
	if err := reader.Rollback(); err != nil {
		t.Fatal(err)
	}
	appendN(t, s, 1, 0) // checkpoints: the WAL is over 4,000 pages
	appendN(t, s, 1, 0) // starts the WAL again from its beginning, where SQLite cuts the file
	if got := walSize(t, s); got > journalLimit {
		t.Errorf("-wal file %d bytes once the reader is gone (peak %d), want at most %d", got, peak, journalLimit)
	}
}

func walSize(t *testing.T, s *Store) int64 {
	t.Helper()
	fi, err := os.Stat(s.Path() + "-wal")
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// Settlements are not bounded per Write (the engine settles what it
// delivered since the last commit): a Write that makes more tombstones than
// compactStep must still delete every one beyond DoneRetention, or a drain
// faster than compactStep records per commit piles tombstones up.
func TestStore_CompactionKeepsUpWithLargeWrites(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "outbox.db"), Options{Sync: "normal", DoneRetention: 100})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	ctx := t.Context()
	le, err := s.Acquire(ctx, stores.PartitionLease("s", 0), "o", time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		appendN(t, s, 6000, 0)
		got, err := s.Claim(ctx, stores.ClaimRequest{Session: "s", Token: le.Token, Limit: 6000})
		if err != nil || len(got) != 6000 {
			t.Fatalf("Claim = %d records, %v", len(got), err)
		}
		w := stores.Batch{Settle: make([]stores.Settlement, len(got))}
		for i, r := range got {
			w.Settle[i] = stores.Settlement{Key: r.Key(), Token: le.Token, Outcome: stores.Done}
		}
		if err := s.Write(ctx, &w); err != nil {
			t.Fatal(err)
		}
		var tombs int
		if err := s.conn.QueryRowContext(ctx, `SELECT count(*) FROM outbox WHERE state=2`).Scan(&tombs); err != nil {
			t.Fatal(err)
		}
		if tombs != 100 {
			t.Fatalf("%d tombstones after a Write of 6,000 Done settlements, want DoneRetention (100)", tombs)
		}
	}
}
