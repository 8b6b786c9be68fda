package sqlite_test

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/gobridge/gobridge/message"
	"github.com/gobridge/gobridge/stores"
	"github.com/gobridge/gobridge/stores/memory"
	"github.com/gobridge/gobridge/stores/sqlite"
)

// FuzzStore_MatchesMemory drives the SQLite store and the memory store
// through the same random operations (appends with ordering and coalesce
// keys, claims, completes, releases, dead letters, clock steps) and fails
// on the first answer that differs: the memory store is the reference.
func FuzzStore_MatchesMemory(f *testing.F) {
	f.Add([]byte{0, 3, 2, 2, 6, 3, 0, 4, 1, 2, 3, 5, 0, 7})
	f.Add([]byte{0, 4, 0, 4, 2, 4, 4, 0, 6, 6, 2, 4, 3, 1, 5, 2, 7, 8})
	f.Add([]byte{0, 1, 0, 1, 0, 1, 2, 1, 6, 9, 2, 3, 1, 3, 4, 7})
	f.Fuzz(func(t *testing.T, ops []byte) {
		if len(ops) > 200 {
			ops = ops[:200]
		}
		sq, err := sqlite.Open(filepath.Join(t.TempDir(), "outbox.db"), sqlite.Options{Sync: "normal"})
		if err != nil {
			t.Fatal(err)
		}
		defer sq.Close()
		mem := memory.New()
		ctx := t.Context()
		t0 := time.Unix(1_700_000_000, 0).UTC()
		now := t0
		var (
			all   []stores.Record // appended, for re-appends
			held  []stores.Record // claimed, maybe since settled
			token int64
		)
		next := func() byte {
			if len(ops) == 0 {
				return 0
			}
			b := ops[0]
			ops = ops[1:]
			return b
		}
		same := func(what string, a, b error) {
			t.Helper()
			if (a == nil) != (b == nil) || (a != nil && errors.Is(a, stores.ErrStaleToken) != errors.Is(b, stores.ErrStaleToken)) {
				t.Fatalf("%s: memory %v, sqlite %v", what, a, b)
			}
		}
		pick := func() (stores.Record, bool) {
			// Only claims that have not lapsed: a lapsed token may be
			// rejected early (stores.Outbox).
			var live []stores.Record
			for _, r := range held {
				if r.ClaimUntil.After(now) {
					live = append(live, r)
				}
			}
			if len(live) == 0 {
				return stores.Record{}, false
			}
			return live[int(next())%len(live)], true
		}
		for step := 0; len(ops) > 0; step++ {
			op := next() % 9
			what := fmt.Sprintf("step %d op %d", step, op)
			switch op {
			case 0, 1: // append 1-4 new records
				n := int(next()%4) + 1
				var recs []stores.Record
				for range n {
					b := next()
					r := stores.Record{Session: "s", Route: "r", Envelope: message.Envelope{
						ID: message.NewID(), Topic: "t", Payload: []byte{b},
						Key:        []string{"", "", "a", "b"}[b%4],
						ReceivedAt: now.Add(time.Duration(b%5) * time.Second),
					}, CreatedAt: now, NextAttemptAt: now}
					if b&0x10 != 0 {
						r.CoalesceKey = "c"
					}
					recs = append(recs, r)
				}
				if op == 1 && len(all) > 0 {
					recs = append(recs, all[int(next())%len(all)])
				}
				all = append(all, recs...)
				same(what, mem.Append(ctx, recs...), sq.Append(ctx, recs...))
			case 2: // claim
				token++
				req := stores.ClaimRequest{Session: "s", Token: token, Limit: int(next()%4) + 1,
					Now: now, Until: now.Add(time.Duration(next()%3+1) * time.Second)}
				a, errA := mem.Claim(ctx, req)
				b, errB := sq.Claim(ctx, req)
				same(what, errA, errB)
				if !slices.EqualFunc(a, b, sameRecord) {
					t.Fatalf("%s: claim differs:\nmemory %s\nsqlite %s", what, summary(a), summary(b))
				}
				held = append(held, a...)
			case 3: // complete
				if r, ok := pick(); ok {
					same(what, mem.Complete(ctx, r), sq.Complete(ctx, r))
				}
			case 4: // release
				if r, ok := pick(); ok {
					at := now.Add(time.Duration(next()%3) * time.Second)
					same(what, mem.Release(ctx, r, at, "e"), sq.Release(ctx, r, at, "e"))
				}
			case 5: // dead-letter
				if r, ok := pick(); ok {
					r.DeadAt = now
					same(what, mem.DeadLetter(ctx, r, "x"), sq.DeadLetter(ctx, r, "x"))
				}
			case 6: // the clock moves
				now = now.Add(time.Duration(next()%4) * 500 * time.Millisecond)
			case 7: // stats
				a, errA := mem.Stats(ctx, "s")
				b, errB := sq.Stats(ctx, "s")
				same(what, errA, errB)
				if a.Pending != b.Pending || !a.OldestCreatedAt.Equal(b.OldestCreatedAt) {
					t.Fatalf("%s: stats memory %+v, sqlite %+v", what, a, b)
				}
			case 8: // dead letters
				a, _, errA := mem.ListDead(ctx, stores.DeadFilter{Limit: 1000})
				b, _, errB := sq.ListDead(ctx, stores.DeadFilter{Limit: 1000})
				same(what, errA, errB)
				if !slices.EqualFunc(a, b, sameRecord) {
					t.Fatalf("%s: dead letters differ:\nmemory %s\nsqlite %s", what, summary(a), summary(b))
				}
			}
		}
	})
}

func sameRecord(a, b stores.Record) bool {
	return a.Envelope.ID == b.Envelope.ID && a.State == b.State && a.Attempts == b.Attempts &&
		a.FirstAttemptAt.Equal(b.FirstAttemptAt) && a.NextAttemptAt.Equal(b.NextAttemptAt) &&
		a.LastError == b.LastError && a.Token == b.Token && a.ClaimUntil.Equal(b.ClaimUntil) &&
		a.DeadReason == b.DeadReason && a.DeadAt.Equal(b.DeadAt) && string(a.Envelope.Payload) == string(b.Envelope.Payload)
}

func summary(rs []stores.Record) string {
	s := ""
	for _, r := range rs {
		s += fmt.Sprintf("[%s key=%q att=%d %s] ", r.Envelope.ID[len(r.Envelope.ID)-4:], r.Envelope.Key, r.Attempts, r.State)
	}
	return s
}
