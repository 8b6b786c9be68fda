package bridge

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"testing"
	"time"

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
	db := filepath.Join(t.TempDir(), "outbox.db")
	st, err := sqlite.Open(db, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	recs := make([]stores.Record, 5)
	for i := range recs {
		recs[i] = stores.Record{Session: "s1", Route: "old", Envelope: message.Envelope{ID: message.NewID(), Topic: "a/1", Payload: []byte(msgID(i))}}
	}
	if err := st.Write(t.Context(), &stores.Batch{Append: recs}); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
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
