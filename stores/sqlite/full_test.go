package sqlite

import (
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/gobridge/gobridge/message"
	"github.com/gobridge/gobridge/stores"
)

// TestStore_WriteReportsFullDisk: on a full database (capped with PRAGMA
// max_page_count, which fails writes with SQLITE_FULL as a full disk does)
// Write reports stores.ErrFull, the failed batch is absent as a whole
// (appends and settlements), the counters are unchanged, and the store
// works again once there is room.
func TestStore_WriteReportsFullDisk(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "outbox.db"), Options{Sync: "normal"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	ctx := t.Context()
	if _, err := s.conn.ExecContext(ctx, `PRAGMA max_page_count = 64`); err != nil {
		t.Fatal(err)
	}
	le, err := s.Acquire(ctx, stores.PartitionLease("s", 0), "o", time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	var prev []stores.Record
	written := 0
	for i := 0; ; i++ {
		if i == 1000 {
			t.Fatal("the capped database never filled up")
		}
		w := stores.Batch{Append: make([]stores.Record, 10)}
		for j := range w.Append {
			w.Append[j] = stores.Record{Session: "s", Route: "r", Token: le.Token, Envelope: message.Envelope{
				ID: message.NewID(), Topic: "t", Payload: make([]byte, 500),
			}}
		}
		for _, r := range prev[:len(prev)/2] {
			w.Settle = append(w.Settle, stores.Settlement{Key: r.Key(), Token: le.Token, Outcome: stores.Done})
		}
		err := s.Write(ctx, &w)
		if err == nil {
			written += len(w.Append) - len(w.Settle)
			prev = w.Append
			continue
		}
		if !errors.Is(err, stores.ErrFull) {
			t.Fatalf("Write on a full database = %v, want ErrFull", err)
		}
		var live, gone int
		if err := s.conn.QueryRowContext(ctx, `SELECT count(*) FILTER (WHERE state=0), count(*) FILTER (WHERE state=2) FROM outbox`).
			Scan(&live, &gone); err != nil {
			t.Fatal(err)
		}
		if live != written || gone != i*5-5 {
			t.Errorf("after the failed Write: %d live, %d tombstones; want %d and %d", live, gone, written, i*5-5)
		}
		st, err := s.Stats(ctx)
		if err != nil || len(st) != 1 || st[0].Live != written {
			t.Errorf("Stats after the failed Write = %+v, %v; want %d live", st, err, written)
		}
		for _, r := range w.Append {
			if r.Seq != 0 || r.Token != le.Token {
				t.Fatalf("a failed Write stamped %+v", r)
			}
		}
		break
	}
	if _, err := s.conn.ExecContext(ctx, `PRAGMA max_page_count = 100000`); err != nil {
		t.Fatal(err)
	}
	w := stores.Batch{Append: []stores.Record{{Session: "s", Route: "r", Envelope: message.Envelope{ID: message.NewID()}}}}
	if err := s.Write(ctx, &w); err != nil || w.Append[0].Seq == 0 {
		t.Fatalf("Write once there is room = %v, seq %d", err, w.Append[0].Seq)
	}
}
