package sqlite

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gobridge/gobridge/message"
	"github.com/gobridge/gobridge/stores"
)

// TestStore_QueryPlans checks that the hot queries search their indexes: no
// scan of the outbox or of a whole index, no temporary b-tree, before and
// after ANALYZE on a table where every row is pending (DESIGN §9).
func TestStore_QueryPlans(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "outbox.db"), Options{Sync: "normal"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	t0 := time.Unix(1_700_000_000, 0)
	var recs []stores.Record
	for i := range 2000 {
		key := ""
		if i%2 == 0 {
			key = fmt.Sprintf("k%d", i%7)
		}
		recs = append(recs, stores.Record{Session: "s", Route: "r", Envelope: message.Envelope{
			ID: message.NewID(), Topic: "t", Payload: []byte("p"), Key: key, ReceivedAt: t0,
		}, CreatedAt: t0, NextAttemptAt: t0})
	}
	if err := s.Append(t.Context(), recs...); err != nil {
		t.Fatal(err)
	}
	now := t0.UnixNano()
	queries := []struct {
		name string
		sql  string
		args []any
	}{
		{"claim", sqlClaim, []any{liveKey(1, 0), liveKey(2, 0), now, 100}},
		{"claim mark", sqlClaimMark, []any{int64(1), now, now, "[1,2]"}},
		{"complete live", sqlCompleteLive, []any{"[1,2]", int64(1)}},
		{"complete check", sqlCompleteCheck, []any{"[1,2]"}},
		{"release", sqlRelease, []any{now, "", int64(1), int64(1), int64(1), "id"}},
		{"dead live", sqlDeadLive, []any{int64(1), int64(1)}},
		{"dead", sqlDead, []any{now, "", 1, now, now, "", int64(1), now, int64(1), "id"}},
		{"live sweep", sqlLiveSweep, []any{int64(1), int64(1)}},
		{"live sweep join", sqlLiveSweepJoin, []any{int64(1)}},
		{"live sweep loose", strings.Replace(sqlLiveSweep, sweepWhere, sweepWhere+sweepLoose, 1), []any{int64(1), int64(1)}},
		{"live sweep join loose", strings.Replace(sqlLiveSweepJoin, sweepWhereJoin, sweepWhereJoin+sweepLooseJoin, 1), []any{int64(1)}},
		{"live one", sqlLiveOne, []any{int64(1), int64(1)}},
		{"live delete", sqlLiveDelete, []any{int64(1)}},
		{"pid find", sqlPidFind, []any{"s", 0}},
		{"coalesce find", sqlCoalesceFind, []any{"s", "r", "c"}},
		{"coalesce other", sqlCoalesceOther, []any{"s", "r", "c", int64(1)}},
		{"later next", sqlLaterNext, []any{now, int64(1)}},
		{"oldest live", sqlOldestLive, []any{"s", 0}},
		{"list dead", sqlListDead, []any{int64(0), int64(0), 10}},
		{"list dead by route", sqlListDeadRoute, []any{"r", int64(0), int64(0), 10}},
		{"get dead", sqlGetDead, []any{"id"}},
	}
	for _, analyze := range []bool{false, true} {
		if analyze {
			if _, err := s.w.Exec(`ANALYZE`); err != nil {
				t.Fatal(err)
			}
		}
		for _, q := range queries {
			rows, err := s.w.Query("EXPLAIN QUERY PLAN "+q.sql, q.args...)
			if err != nil {
				t.Fatalf("%s: %v", q.name, err)
			}
			var plan []string
			for rows.Next() {
				var id, parent, notused int
				var detail string
				if err := rows.Scan(&id, &parent, &notused, &detail); err != nil {
					t.Fatal(err)
				}
				plan = append(plan, detail)
			}
			rows.Close()
			text := strings.Join(plan, "\n")
			for _, line := range plan {
				fullScan := strings.HasPrefix(line, "SCAN ") && !strings.HasPrefix(line, "SCAN json_each")
				if fullScan || strings.Contains(line, "TEMP B-TREE") {
					t.Errorf("%s (analyze=%v): plan has %q:\n%s", q.name, analyze, line, text)
				}
			}
			if testing.Verbose() {
				t.Logf("%s (analyze=%v):\n%s", q.name, analyze, text)
			}
		}
	}
}
