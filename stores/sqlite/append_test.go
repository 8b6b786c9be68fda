package sqlite

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/gobridge/gobridge/message"
	"github.com/gobridge/gobridge/stores"
)

// TestStore_AppendChunkDepth checks the per-partition depth counters through
// both multi-row insert paths (one partition: counted from the change count;
// mixed partitions: counted from RETURNING), with re-appended records in the
// chunks, against the rows actually live in the table.
func TestStore_AppendChunkDepth(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "outbox.db"), Options{Sync: "normal"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	t0 := time.Unix(1_700_000_000, 0)
	recs := func(n int, part func(i int) int) []stores.Record {
		rs := make([]stores.Record, n)
		for i := range rs {
			rs[i] = stores.Record{Session: "s", Partition: part(i), Route: "r", Envelope: message.Envelope{
				ID: message.NewID(), Topic: "t", Payload: []byte("p"), ReceivedAt: t0,
			}, CreatedAt: t0, NextAttemptAt: t0}
		}
		return rs
	}
	zero := func(int) int { return 0 }
	first := recs(2*insertChunk, zero)
	mixed := recs(insertChunk, func(i int) int { return i % 2 })
	newer := recs(insertChunk, zero)
	halfOld := append(append([]stores.Record{}, first[:insertChunk/2]...), recs(insertChunk/2, zero)...)
	odd := recs(insertChunk-1, func(i int) int { return i % 2 }) // 16 + 8 + 4 + 2 + 1 rows, mixed
	for _, batch := range [][]stores.Record{
		first,
		append(append([]stores.Record{}, first...), newer...), // two chunks of re-appends, one new
		mixed,
		halfOld,
		odd,
		append(append([]stores.Record{}, odd[:3]...), recs(2, zero)...), // 4 + 1 rows, 2 new
	} {
		if err := s.Append(t.Context(), batch...); err != nil {
			t.Fatal(err)
		}
	}
	rows, err := s.w.QueryContext(t.Context(), `SELECT d.part, d.live, (SELECT count(*) FROM live AS l JOIN parts AS p ON l.k >> 43 = p.pid
		WHERE p.session = d.session AND p.part = d.part), (SELECT count(*) FROM outbox
		WHERE session = d.session AND part = d.part AND state = 'live') FROM depth AS d`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	want := map[int]int{0: 2*insertChunk + insertChunk + insertChunk/2 + insertChunk/2 + insertChunk/2 + 2,
		1: insertChunk/2 + insertChunk/2 - 1}
	got := map[int]int{}
	for rows.Next() {
		var part, live, count, outbox int
		if err := rows.Scan(&part, &live, &count, &outbox); err != nil {
			t.Fatal(err)
		}
		if live != count || live != outbox {
			t.Errorf("partition %d: depth counter %d, live rows %d, live outbox rows %d", part, live, count, outbox)
		}
		got[part] = live
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for p, n := range want {
		if got[p] != n {
			t.Errorf("partition %d: depth %d, want %d", p, got[p], n)
		}
	}
	st, err := s.Stats(t.Context(), "s")
	if err != nil {
		t.Fatal(err)
	}
	if st.Pending != want[0]+want[1] {
		t.Errorf("Stats.Pending = %d, want %d", st.Pending, want[0]+want[1])
	}
}
