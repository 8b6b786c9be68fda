package sqlite

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/gobridge/gobridge/message"
	"github.com/gobridge/gobridge/stores"
)

// probeSizes logs the sizes of s's files and its page counts.
func probeSizes(t *testing.T, s *Store, stage string) {
	t.Helper()
	var pc, fl, av, tombs int64
	ctx := t.Context()
	_ = s.conn.QueryRowContext(ctx, `PRAGMA page_count`).Scan(&pc)
	_ = s.conn.QueryRowContext(ctx, `PRAGMA freelist_count`).Scan(&fl)
	_ = s.conn.QueryRowContext(ctx, `PRAGMA auto_vacuum`).Scan(&av)
	_ = s.conn.QueryRowContext(ctx, `SELECT count(*) FROM outbox WHERE state=2`).Scan(&tombs)
	fi, _ := os.Stat(s.path)
	wi, _ := os.Stat(s.path + "-wal")
	var ws int64
	if wi != nil {
		ws = wi.Size()
	}
	t.Logf("%-28s file %7.1f MiB wal %6.1f MiB pages %7d free %7d auto_vacuum %d tombs %d", stage,
		float64(fi.Size())/(1<<20), float64(ws)/(1<<20), pc, fl, av, tombs)
}

// probeFill appends n records with payloads of payload bytes.
func probeFill(t *testing.T, s *Store, n, payload int) {
	t.Helper()
	p := make([]byte, payload)
	for n > 0 {
		k := min(n, 1000)
		b := stores.Batch{Append: make([]stores.Record, k)}
		for i := range b.Append {
			b.Append[i] = stores.Record{Session: "s", Route: "r", Envelope: message.Envelope{ID: message.NewID(), Topic: "factory/1/telemetry", Payload: p, QoS: 1}}
		}
		if err := s.Write(t.Context(), &b); err != nil {
			t.Fatal(err)
		}
		n -= k
	}
}

// probeDrain claims and completes every live record, 256 at a time.
func probeDrain(t *testing.T, s *Store) {
	t.Helper()
	ctx := t.Context()
	le, err := s.Acquire(ctx, stores.PartitionLease("s", 0), "o", time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	var after int64
	for {
		got, err := s.Claim(ctx, stores.ClaimRequest{Session: "s", Token: le.Token, Limit: 256, After: after})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) == 0 {
			break
		}
		after = got[len(got)-1].Seq
		w := stores.Batch{Settle: make([]stores.Settlement, len(got))}
		for i, r := range got {
			w.Settle[i] = stores.Settlement{Key: r.Key(), Token: le.Token, Outcome: stores.Done}
		}
		if err := s.Write(ctx, &w); err != nil {
			t.Fatal(err)
		}
	}
	_ = s.Release(ctx, le)
}

// TestStore_DiskAcrossOutages logs the file and WAL sizes, page and free
// page counts and tombstones through three outages of
// GOBRIDGE_SQLITE_OUTAGE records of 1 KiB (e.g. 200000: about a minute),
// each drained and followed by 150,000 small records (the README's
// "what to provision" numbers). It asserts nothing.
func TestStore_DiskAcrossOutages(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("GOBRIDGE_SQLITE_OUTAGE"))
	if n == 0 {
		t.Skip("set GOBRIDGE_SQLITE_OUTAGE=200000 to run (about a minute)")
	}
	payload := 1000
	s, err := Open(filepath.Join(t.TempDir(), "outbox.db"), Options{Sync: "normal"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	probeSizes(t, s, "empty")
	for o := 1; o <= 3; o++ {
		probeFill(t, s, n, payload)
		probeSizes(t, s, "outage "+strconv.Itoa(o)+" peak")
		probeDrain(t, s)
		probeSizes(t, s, "outage "+strconv.Itoa(o)+" drained")
		probeFill(t, s, 150_000, 50) // steady traffic after
		probeDrain(t, s)
		probeSizes(t, s, "outage "+strconv.Itoa(o)+" +150k steady")
	}
}
