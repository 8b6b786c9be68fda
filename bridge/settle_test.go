package bridge

import (
	"database/sql"
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/gobridge/gobridge/message"
	"github.com/gobridge/gobridge/stores"
	"github.com/gobridge/gobridge/stores/sqlite"
)

// failOnSQLite makes the SQLite file at path fail, until the returned func
// lifts it, every write that marks a record delivered (an error the writer
// retries, as it retries a full disk).
func failOnSQLite(t *testing.T, path string) (lift func()) {
	t.Helper()
	return sqliteTrigger(t, path, `CREATE TRIGGER refuse BEFORE UPDATE OF state ON outbox WHEN NEW.state = 2
		BEGIN SELECT RAISE(ABORT, 'simulated: disk I/O error'); END`)
}

// refuseOnSQLite makes the SQLite file at path refuse, as a value too big
// to hold (SQLITE_TOOBIG, which the store reports as stores.ErrInvalid),
// every update of a record whose dead-letter reason contains marker: a
// settlement the store cannot hold. It works through a second connection,
// as the store itself sees it; the returned func lifts it.
func refuseOnSQLite(t *testing.T, path, marker string) (lift func()) {
	t.Helper()
	return sqliteTrigger(t, path, `CREATE TRIGGER refuse BEFORE UPDATE ON outbox WHEN instr(NEW.dead_reason, '`+marker+
		`') > 0 BEGIN SELECT zeroblob(2000000000); END`)
}

// sqliteTrigger creates a trigger named refuse in the SQLite file at path
// through a second connection, as the store sees it; lift drops it.
func sqliteTrigger(t *testing.T, path, create string) (lift func()) {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	if _, err := db.Exec(create); err != nil {
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

// While the store fails to record deliveries (a full disk, an I/O error),
// the writer retries; once the store recovers every outcome is recorded,
// with nothing resent. When the bridge stops meanwhile, the records stay
// claimed, and the next process delivers them again.
func TestBridge_SettlementsHealOnceTheStoreRecovers(t *testing.T) {
	t.Parallel()
	s := newSink(t)
	gates := [2]chan struct{}{make(chan struct{}), make(chan struct{})}
	s.hook = func(body string) { // the target answers once the store fails
		if body < msgID(20) {
			<-gates[0]
		} else {
			<-gates[1]
		}
	}
	addr, db := freeAddr(t), filepath.Join(t.TempDir(), "outbox.db")
	yml := listenerConfig(addr, "", fmt.Sprintf("{type: sqlite, options: {path: %q}}", db),
		fmt.Sprintf(`  - {id: sink, type: http, options: {url: %q}}`, s.srv.URL), `
  - {id: a, receiver: edge, topic: "a/#", sender: sink, delivery_mode: shared_outbox, session: {id: sa}}`)
	yml = strings.Replace(yml, "shutdown_timeout: 10s", "shutdown_timeout: 1s", 1)
	b, stop := runStoppable(t, parseConfig(t, yml))
	pub := publisher(t, "tcp://"+addr, "heal")
	// publish appends [from, to) (acknowledged), makes the store fail, lets
	// the target accept them, and waits for the writer to fail recording it.
	publish := func(from, to int, gate chan struct{}) (lift func()) {
		var toks []paho.Token
		for i := from; i < to; i++ {
			toks = append(toks, pub.Publish("a/1", 1, false, msgID(i)))
		}
		waitTokens(t, toks, 20*time.Second)
		lift = failOnSQLite(t, db)
		close(gate)
		waitFor(t, 20*time.Second, "the sink to receive them", func() bool { return s.distinct() == to })
		waitFor(t, 20*time.Second, "a write to fail", func() bool { return b.writer.failingFor() > 0 })
		return lift
	}
	live := func(b *Bridge) int { return sessionStats(t, b, "sa").Live }

	lift := publish(0, 20, gates[0])
	if n := live(b); n != 20 {
		t.Fatalf("%d live records while deliveries cannot be recorded; want 20", n)
	}
	lift()
	waitFor(t, 20*time.Second, "the deliveries to be recorded", func() bool { return live(b) == 0 })
	if n := s.total.Load(); n != 20 {
		t.Errorf("%d deliveries of 20 records; want no resend", n)
	}

	lift = publish(20, 40, gates[1])
	stop() // the outcomes are not recorded: the records stay claimed
	lift()
	b2, _ := runStoppable(t, parseConfig(t, yml))
	waitFor(t, 20*time.Second, "the next process to deliver them", func() bool { return live(b2) == 0 })
	for i := range 40 {
		if s.count(msgID(i)) == 0 {
			t.Fatalf("%s never delivered", msgID(i))
		}
	}
}
