package bridge

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gobridge/gobridge/internal/testservices"
	"github.com/gobridge/gobridge/message"
	"github.com/gobridge/gobridge/stores"
	"github.com/gobridge/gobridge/stores/sqlite"
)

// A renamed route never dead-letters its records silently (issue 14): with
// records of route "old" in the outbox, a configuration without it refuses
// to start and says how to proceed; with previous_ids: [old] the renamed
// route delivers them.
func TestBridge_RefusesOrphanedRecordsUntilARouteTakesThemOver(t *testing.T) {
	t.Parallel()
	db := seedOutbox(t, 5, func(i int, r *stores.Record) { r.Route = "old" })
	s := newSink(t)
	config := func(previous string) string {
		return listenerConfig(freeAddr(t), "", fmt.Sprintf("{type: sqlite, options: {path: %q}}", db),
			fmt.Sprintf(`  - {id: sink, type: http, options: {url: %q}}`, s.srv.URL), `
  - id: renamed
    receiver: edge
    topic: "#"
    sender: sink
    delivery_mode: shared_outbox
    session: {id: s1}`+previous)
	}
	b, err := New(parseConfig(t, config("")), Options{Logger: testLogger(t), Stdout: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := b.Run(ctx); !errors.Is(err, ErrOrphans) {
		t.Fatalf("Run with records of a route the config lacks = %v, want ErrOrphans", err)
	}
	if s.distinct() != 0 {
		t.Fatal("orphaned records were sent")
	}
	runStoppable(t, parseConfig(t, config("\n    previous_ids: [old]")))
	waitFor(t, 10*time.Second, "the renamed route delivering the old route's records", func() bool { return s.distinct() == 5 })
}

// A restart with fewer session.partitions would leave the records of the
// partitions it drops undelivered for good (no drainer takes a partition
// beyond the count): it is refused, naming the partition, and the old
// count delivers them.
func TestBridge_RefusesFewerPartitionsWhileTheirRecordsWait(t *testing.T) {
	t.Parallel()
	db := seedOutbox(t, 8, func(i int, r *stores.Record) { r.Route, r.Partition = "r", i%4 })
	s := newSink(t)
	config := func(partitions int) string {
		return listenerConfig(freeAddr(t), "", fmt.Sprintf("{type: sqlite, options: {path: %q}}", db),
			fmt.Sprintf(`  - {id: sink, type: http, options: {url: %q}}`, s.srv.URL), fmt.Sprintf(`
  - {id: r, receiver: edge, topic: "#", sender: sink, delivery_mode: shared_outbox, session: {id: s1, partitions: %d}}`, partitions))
	}
	b, err := New(parseConfig(t, config(2)), Options{Logger: testLogger(t), Stdout: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	err = b.Run(ctx)
	if !errors.Is(err, ErrOrphans) || !strings.Contains(err.Error(), "session s1 holds records in partition 3") || strings.Contains(err.Error(), "previous_ids") {
		t.Fatalf("Run with records in partitions 2 and 3 and partitions: 2 = %v, want ErrOrphans naming partition 3", err)
	}
	if s.distinct() != 0 {
		t.Fatal("records were sent by a process that refused to start")
	}
	runStoppable(t, parseConfig(t, config(4)))
	waitFor(t, 10*time.Second, "every record delivered with the old count", func() bool { return s.distinct() == 8 })
}

// Two live processes with one bridge.id on a shared (DynamoDB) store would
// take each other's leases: the second is refused at start, naming it,
// once the first has kept its instance lease for a whole TTL; a holder that
// stopped renewing (a process killed a moment ago) only delays the start
// (DESIGN.md §11.2).
func TestBridge_RefusesASecondLiveInstanceWithTheSameID(t *testing.T) {
	t.Parallel()
	endpoint := testservices.DynamoDBEndpoint(t)
	table := fmt.Sprintf("rt_dup_%d", time.Now().UnixNano())
	testservices.DropTablesAtCleanup(t, endpoint, table)
	store := fmt.Sprintf("{type: dynamodb, options: {table: %s, region: us-east-1, endpoint: %q}}", table, endpoint)
	cfg := func() string {
		return listenerConfig(freeAddr(t), "", store, `  - {id: out, type: stdout}`, `
  - {id: r, receiver: edge, topic: "#", sender: out, delivery_mode: shared_outbox, session: {id: s1}}`)
	}
	first, err := New(parseConfig(t, cfg()), Options{Logger: testLogger(t), Stdout: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	startRun(t, first)
	waitFor(t, 20*time.Second, "the first instance holding its lease", func() bool {
		ls, err := first.store.List(t.Context(), "instance/test", time.Now())
		return err == nil && len(ls) == 1
	})
	second, err := New(parseConfig(t, cfg()), Options{Logger: testLogger(t), Stdout: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err = second.Run(t.Context())
	if !errors.Is(err, ErrDuplicateInstance) || !strings.Contains(err.Error(), `"test"`) {
		t.Fatalf("second instance: %v, want ErrDuplicateInstance naming the bridge.id", err)
	}
	t.Logf("refused after %s: %v", time.Since(start).Round(time.Second), err)
}

// A process that loses its instance lease to another (it stalled past the
// TTL while a second instance with its bridge.id started) stops with
// ErrDuplicateInstance: before, it logged an error every renewal and both
// ran on.
func TestBridge_StopsWhenAnotherInstanceTakesItsLease(t *testing.T) {
	t.Parallel()
	db := filepath.Join(t.TempDir(), "outbox.db")
	cfg := strings.Replace(listenerConfig(freeAddr(t), "", fmt.Sprintf("{type: sqlite, options: {path: %q}}", db), `  - {id: out, type: stdout}`, `
  - {id: r, receiver: edge, topic: "#", sender: out, delivery_mode: shared_outbox, session: {id: s1}}`),
		"shutdown_timeout: 10s", "shutdown_timeout: 10s\n  lease_ttl: 3s", 1)
	b, err := New(parseConfig(t, cfg), Options{Logger: testLogger(t), Stdout: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- b.Run(t.Context()) }()
	waitFor(t, 20*time.Second, "the instance lease", func() bool {
		ls, err := b.store.List(t.Context(), "instance/test", time.Now())
		return err == nil && len(ls) == 1
	})
	// Another process takes it, as it may once the lease has lapsed.
	if _, err := b.store.Acquire(t.Context(), "instance/test", "intruder", time.Hour, time.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, ErrDuplicateInstance) {
			t.Fatalf("Run = %v, want ErrDuplicateInstance", err)
		}
		t.Log(err)
	case <-time.After(30 * time.Second): // ten renewal periods
		t.Fatal("the bridge ran on after another process took its instance lease")
	}
}

// seedOutbox writes n live records of session s1 (topic a/1, payload
// msgID(i), shaped by set) to a new SQLite outbox, as a process stopped
// before delivering them left it, and returns its path.
func seedOutbox(t *testing.T, n int, set func(i int, r *stores.Record)) string {
	t.Helper()
	db := filepath.Join(t.TempDir(), "outbox.db")
	st, err := sqlite.Open(db, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	recs := make([]stores.Record, n)
	for i := range recs {
		recs[i] = stores.Record{Session: "s1", Envelope: message.Envelope{ID: message.NewID(), Topic: "a/1", Payload: []byte(msgID(i))}}
		set(i, &recs[i])
	}
	if err := st.Write(t.Context(), &stores.Batch{Append: recs}); err != nil {
		t.Fatal(err)
	}
	return db
}
