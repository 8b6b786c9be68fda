package bridge

import (
	"database/sql"
	"math"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gobridge/gobridge/message"
	"github.com/gobridge/gobridge/stores"
	"github.com/gobridge/gobridge/stores/sqlite"
)

// refuseOnSQLite makes the SQLite file at path refuse, as a value too big
// to hold (SQLITE_TOOBIG, which the store reports as stores.ErrInvalid),
// every update of a record whose dead-letter reason contains marker: a
// settlement the store cannot hold. It works through a second connection,
// as the store itself sees it; the returned func lifts it.
func refuseOnSQLite(t *testing.T, path, marker string) (lift func()) {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	if _, err := db.Exec(`CREATE TRIGGER refuse BEFORE UPDATE ON outbox WHEN instr(NEW.dead_reason, '` + marker +
		`') > 0 BEGIN SELECT zeroblob(2000000000); END`); err != nil {
		t.Fatal(err)
	}
	return func() {
		if _, err := db.Exec(`DROP TRIGGER refuse`); err != nil {
			t.Fatal(err)
		}
	}
}

// A settlement the store refuses costs its own record only: the other
// settlements written with it are recorded, admission still counts the
// refused record as live (the store holds it), and /readyz says which
// route holds a record whose outcome could not be recorded.
func TestWriter_ARefusedSettlementCostsOnlyItsRecord(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "outbox.db")
	st, err := sqlite.Open(path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	ctx := t.Context()
	le, err := st.Acquire(ctx, stores.PartitionLease("s", 0), "o", time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	b := stores.Batch{Append: make([]stores.Record, 3)}
	for i := range b.Append {
		b.Append[i] = stores.Record{Session: "s", Route: "r", Token: le.Token,
			Envelope: message.Envelope{ID: message.NewID(), Topic: "t", Payload: []byte("p")}}
	}
	if err := st.Write(ctx, &b); err != nil {
		t.Fatal(err)
	}
	refuseOnSQLite(t, path, "refuse me")

	m, err := newMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	limits := newAdmission(st.Stats)
	limits.sessions["s"] = &tally{max: 10, maxBytes: math.MaxInt64}
	limits.routes["r"] = &tally{max: 10, maxBytes: math.MaxInt64}
	limits.refresh(ctx, false)
	w := newWriter(st, m, testLogger(t), limits)
	w.setGroups(nil)
	// Queued before the writer runs: one batch carries all three.
	w.Settle(stores.Settlement{Key: b.Append[0].Key(), Token: le.Token, Outcome: stores.DeadLetter, Reason: "permanent: refuse me"})
	w.Settle(stores.Settlement{Key: b.Append[1].Key(), Token: le.Token, Outcome: stores.Done})
	w.Settle(stores.Settlement{Key: b.Append[2].Key(), Token: le.Token, Outcome: stores.DeadLetter, Reason: "permanent: 400"})
	running := make(chan struct{})
	go func() { defer close(running); w.run() }()
	t.Cleanup(func() { w.stop(); <-running })
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}

	stats, err := st.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(stats) != 1 || stats[0].Live != 1 || stats[0].Routes["r"].Dead != 1 {
		t.Errorf("the store holds %+v; want the refused record live, one done, one dead letter", stats)
	}
	if n := limits.live("s"); n != 1 {
		t.Errorf("admission counts %d live records; the store holds 1", n)
	}
	if r := limits.refusals()["r"]; !strings.Contains(r, b.Append[0].Envelope.ID) {
		t.Errorf("refusals of route r = %q; want the record whose outcome the store refused", r)
	}
}
