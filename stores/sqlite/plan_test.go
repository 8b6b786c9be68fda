package sqlite

import (
	"database/sql"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gobridge/gobridge/message"
	"github.com/gobridge/gobridge/stores"
)

// TestStore_QueryPlans checks that the store's queries search the index
// they are written for (DESIGN §9: a partial index is used only when the
// query repeats its predicate literally): no scan of the outbox, no
// temporary b-tree, before and after ANALYZE on a table where most rows are
// live. Each query is the one the code runs, by the same constant where the
// code has one.
func TestStore_QueryPlans(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "outbox.db"), Options{Sync: "normal"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	ctx := t.Context()
	t0 := time.Unix(1_700_000_000, 0)
	var b stores.Batch
	for i := range 2000 {
		r := stores.Record{Session: "s", Partition: i % 4, Route: "r", Envelope: message.Envelope{
			ID: message.NewID(), Topic: "t", Payload: []byte("p"), ReceivedAt: t0,
		}, CreatedAt: t0}
		switch i % 10 {
		case 1:
			r.CoalesceKey = fmt.Sprint("c", i%7)
		case 2:
			r.State, r.DeadReason = stores.Dead, "bad"
		}
		b.Append = append(b.Append, r)
	}
	if err := s.Write(ctx, &b); err != nil {
		t.Fatal(err)
	}
	le, err := s.Acquire(ctx, stores.PartitionLease("s", 0), "o", time.Hour, t0)
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.Claim(ctx, stores.ClaimRequest{Session: "s", Token: le.Token, Limit: 100})
	if err != nil || len(got) == 0 {
		t.Fatalf("Claim: %d records, %v", len(got), err)
	}
	settle := stores.Batch{}
	for _, r := range got[:50] {
		settle.Settle = append(settle.Settle, stores.Settlement{Key: r.Key(), Token: le.Token, Outcome: stores.Done})
	}
	if err := s.Write(ctx, &settle); err != nil {
		t.Fatal(err)
	}

	queries := []struct {
		name  string
		sql   string
		index string // the index the plan must use
		args  []any
		sorts bool // a temporary b-tree is fine: it sorts the few records of one envelope ID
	}{
		{"claim", claimQuery, "outbox_claim", []any{1, "s", 0, 0, 100}, false},
		{"done", doneQuery(4), "outbox_key", []any{1, "a", "r", "s", 1, "b", "r", "s", 1, "c", "r", "s", 1, "d", "r", "s", 1}, false},
		{"insert", insertQuery(4), "", zeros(4 * 26), false},
		{"retry", retryQuery, "outbox_key", []any{1, "a", "r", "s", 0, 0, "", 1}, false},
		{"dead letter", deadLetterQuery, "outbox_key", []any{1, "a", "r", "s", 0, "", 0, 1}, false},
		{"drop", dropQuery, "outbox_key", []any{1, "a", "r", "s"}, false},
		{"absorb", absorbQuery, "outbox_coalesce", []any{1, "a", "r", "s", "c1", 0, 0}, false},
		{"coalesce replace", replaceQuery, "outbox_coalesce", []any{1, "a", "r", "s", "c1"}, false},
		{"compact", compactQuery, "outbox_tomb", []any{10}, false}, // the first rows of the index, in order
		{"oldest", oldestQuery, "outbox_age", []any{"s"}, false},
		{"lease", leaseQuery, "", []any{"outbox/s/0"}, false},
		{"dead all", deadList, "outbox_dead", []any{0, 0, 10}, false},
		{"dead by route", deadListOfRoute, "outbox_dead_route", []any{0, 0, "r", 10}, false},
		{"dead by ID", deadByID, "outbox_key", []any{"a", 10}, true},
	}
	for _, analyze := range []bool{false, true} {
		if analyze {
			if _, err := s.conn.ExecContext(ctx, `ANALYZE`); err != nil {
				t.Fatal(err)
			}
		}
		for _, q := range queries {
			plan := explain(t, s.conn, q.sql, q.args)
			for _, line := range plan {
				scan := strings.HasPrefix(line, "SCAN outbox") && (q.index == "" || !strings.Contains(line, "INDEX "+q.index))
				if scan || (strings.Contains(line, "TEMP B-TREE") && !q.sorts) {
					t.Errorf("%s (analyze=%v): plan has %q:\n%s", q.name, analyze, line, strings.Join(plan, "\n"))
				}
			}
			if q.index != "" && !strings.Contains(strings.Join(plan, "\n")+"\n", "INDEX "+q.index) {
				t.Errorf("%s (analyze=%v): plan does not search %s:\n%s", q.name, analyze, q.index, strings.Join(plan, "\n"))
			}
			if testing.Verbose() {
				t.Logf("%s (analyze=%v):\n%s", q.name, analyze, strings.Join(plan, "\n"))
			}
		}
	}
}

func explain(t *testing.T, conn *sql.Conn, query string, args []any) []string {
	t.Helper()
	rows, err := conn.QueryContext(t.Context(), "EXPLAIN QUERY PLAN "+query, args...)
	if err != nil {
		t.Fatalf("explain %s: %v", query, err)
	}
	defer rows.Close()
	var plan []string
	for rows.Next() {
		var id, parent, notused int
		var detail string
		if err := rows.Scan(&id, &parent, &notused, &detail); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, detail)
	}
	return plan
}

func zeros(n int) []any {
	a := make([]any, n)
	for i := range a {
		a[i] = 0
	}
	return a
}
