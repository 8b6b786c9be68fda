package sqlite

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/gobridge/gobridge/message"
	"github.com/gobridge/gobridge/stores"
)

// TestStore_Tombstones: delivered, dropped and coalesced-away records keep
// their key without payload, topic or headers; Write deletes the oldest
// beyond DoneRetention, at most compactStep per call, and the newest still
// absorb a re-append, also after a reopen; a negative retention keeps none.
func TestStore_Tombstones(t *testing.T) {
	path := filepath.Join(t.TempDir(), "outbox.db")
	open := func(retention int) *Store {
		s, err := Open(path, Options{Sync: "normal", DoneRetention: retention})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	s := open(50)
	ctx := t.Context()
	le, err := s.Acquire(ctx, stores.PartitionLease("s", 0), "o", time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	tombstones := func() (n int, bytes int64) {
		t.Helper()
		err := s.conn.QueryRowContext(ctx, `SELECT count(*), coalesce(sum(length(payload) + length(topic) + length(headers)), 0)
			FROM outbox WHERE state=2`).Scan(&n, &bytes)
		if err != nil {
			t.Fatal(err)
		}
		return n, bytes
	}
	var prev, delivered []stores.Record
	for i := range 30 {
		w := stores.Batch{Append: make([]stores.Record, 10)}
		for j := range w.Append {
			w.Append[j] = stores.Record{Session: "s", Route: "r", Token: le.Token, Envelope: message.Envelope{
				ID: message.NewID(), Topic: "t", Payload: []byte("payload"), Headers: map[string]string{"h": "v"},
			}}
		}
		if i == 0 { // and a dead letter to drop
			w.Append[0].State, w.Append[0].DeadReason = stores.Dead, "bad"
		}
		for _, r := range prev {
			w.Settle = append(w.Settle, stores.Settlement{Key: r.Key(), Token: le.Token, Outcome: stores.Done})
		}
		if i == 1 {
			w.Settle[0] = stores.Settlement{Key: prev[0].Key(), Outcome: stores.Drop}
		}
		if err := s.Write(ctx, &w); err != nil {
			t.Fatal(err)
		}
		if n, _ := tombstones(); n > 50 {
			t.Fatalf("write %d: %d tombstones, retention 50", i, n)
		}
		delivered, prev = prev, w.Append
	}
	if n, bytes := tombstones(); n != 50 || bytes != 0 {
		t.Errorf("%d tombstones holding %d bytes of payload, topic and headers; want 50 and 0", n, bytes)
	}
	s.Close()
	s = open(50)
	w := stores.Batch{Append: delivered}
	if err := s.Write(ctx, &w); err != nil {
		t.Fatal(err)
	}
	for _, r := range w.Append {
		if r.Seq != 0 {
			t.Errorf("a delivered record was appended again after the reopen")
		}
	}
	if st, err := s.Stats(ctx); err != nil || len(st) != 1 || st[0].Live != 10 || st[0].Bytes != 10*prev[0].Size() {
		t.Fatalf("stats after the reopen: %+v, %v; want the 10 undelivered", st, err)
	}
	s.Close()
	s = open(-1)
	if err := s.Write(ctx, &stores.Batch{}); err != nil {
		t.Fatal(err)
	}
	if n, _ := tombstones(); n != 0 {
		t.Errorf("retention -1: %d tombstones", n)
	}
}

// TestStore_CompactsInBoundedSteps: one Write deletes at most compactStep
// tombstones.
func TestStore_CompactsInBoundedSteps(t *testing.T) {
	path := filepath.Join(t.TempDir(), "outbox.db")
	s, err := Open(path, Options{Sync: "normal"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	var recs []stores.Record
	for range compactStep + 100 {
		recs = append(recs, stores.Record{Session: "s", Route: "r", State: stores.Dead, DeadReason: "x",
			Envelope: message.Envelope{ID: message.NewID()}})
	}
	w := stores.Batch{Append: recs}
	if err := s.Write(ctx, &w); err != nil {
		t.Fatal(err)
	}
	w = stores.Batch{}
	for _, r := range recs {
		w.Settle = append(w.Settle, stores.Settlement{Key: r.Key(), Outcome: stores.Drop})
	}
	if err := s.Write(ctx, &w); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s, err = Open(path, Options{Sync: "normal", DoneRetention: 10})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, want := range []int64{100, 10} { // 4,196 - 4,096, then down to 10
		if err := s.Write(ctx, &stores.Batch{}); err != nil {
			t.Fatal(err)
		}
		var n int64
		if err := s.conn.QueryRowContext(ctx, `SELECT count(*) FROM outbox WHERE state=2`).Scan(&n); err != nil || n != want {
			t.Errorf("%d tombstones (%v), want %d", n, err, want)
		}
	}
}

// TestStore_DurableCommits: a Write that appends or drops commits with the
// store's Sync (an fsync with "full"), also right after a claim or a Write
// of settlements alone, which commit without one.
func TestStore_DurableCommits(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "outbox.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := t.Context()
	l, err := s.Acquire(ctx, stores.PartitionLease("s", 0), "me", time.Minute, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	synchronous := func(step string, want int) {
		t.Helper()
		var got int
		if err := s.conn.QueryRowContext(ctx, `PRAGMA synchronous`).Scan(&got); err != nil || got != want {
			t.Fatalf("after %s: synchronous = %d (%v), want %d", step, got, err, want)
		}
	}
	const full, normal = 2, 1
	a, b := durableRec("a"), durableRec("b")
	for _, r := range []*stores.Record{&a, &b} {
		r.Session, r.Token = "s", l.Token
	}
	if err := s.Write(ctx, &stores.Batch{Append: []stores.Record{a}}); err != nil {
		t.Fatal(err)
	}
	synchronous("an append", full)
	if _, err := s.Claim(ctx, stores.ClaimRequest{Session: "s", Token: l.Token, Limit: 10}); err != nil {
		t.Fatal(err)
	}
	synchronous("a claim", normal)
	if err := s.Write(ctx, &stores.Batch{Append: []stores.Record{b}}); err != nil {
		t.Fatal(err)
	}
	synchronous("an append after a claim", full)
	done := stores.Batch{Settle: []stores.Settlement{{Key: a.Key(), Token: l.Token, Outcome: stores.Done}}}
	if err := s.Write(ctx, &done); err != nil || done.Settle[0].Stale {
		t.Fatalf("settle: %v, stale %v", err, done.Settle[0].Stale)
	}
	synchronous("settlements alone", normal)
	dead := durableRec("c")
	dead.State, dead.DeadReason = stores.Dead, "x"
	if err := s.Write(ctx, &stores.Batch{Append: []stores.Record{dead}}); err != nil {
		t.Fatal(err)
	}
	synchronous("a dead letter", full)
	if err := s.Write(ctx, &stores.Batch{Settle: []stores.Settlement{{Key: dead.Key(), Outcome: stores.Drop}}}); err != nil {
		t.Fatal(err)
	}
	synchronous("a drop", full)
}

func durableRec(id string) stores.Record {
	return stores.Record{Session: "s", Route: "r", Envelope: message.Envelope{ID: id, Topic: "t", Payload: []byte("p")}}
}
