package processors

import (
	"fmt"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/gobridge/gobridge/message"
	"github.com/gobridge/gobridge/routes"
	"github.com/gobridge/gobridge/stores"
	"github.com/gobridge/gobridge/stores/sqlite"
)

// TestCoalesce_SQLiteKeepsNewestPerKey drives heartbeats through a coalesce
// chain into a real SQLite outbox while nothing drains it (the sink is
// down): when the drainer claims, there is one record per key, the newest.
func TestCoalesce_SQLiteKeepsNewestPerKey(t *testing.T) {
	t.Parallel()
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "outbox.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	c := compile(t, "",
		routes.ProcessorConfig{Type: TypeFilter, Expr: "payload.kind == 'heartbeat'"},
		routes.ProcessorConfig{Type: TypeCoalesce, Key: "{topic.1}"},
	)
	ctx := t.Context()
	base := time.Now().Add(-time.Hour)
	appendBeat := func(device, seq int) {
		t.Helper()
		e := &message.Envelope{
			ID:         message.NewID(),
			Topic:      fmt.Sprintf("hb/dev-%d/status", device),
			Payload:    []byte(`{"kind":"heartbeat","seq":` + strconv.Itoa(seq) + `}`),
			QoS:        1,
			ReceivedAt: base.Add(time.Duration(seq) * time.Second),
		}
		res, err := c.Process(e)
		if err != nil || res.Drop {
			t.Fatalf("Process = %+v, %v", res, err)
		}
		rec := stores.Record{Session: "s", Route: "heartbeats", Envelope: *e, CoalesceKey: res.CoalesceKey}
		if err := st.Write(ctx, &stores.Batch{Append: []stores.Record{rec}}); err != nil {
			t.Fatalf("Write: %v", err)
		}
	}
	for seq := 1; seq <= 40; seq++ {
		appendBeat(seq%3, seq)
	}
	appendBeat(0, 5) // late and older than dev-0's newest (39): must not replace it

	le, err := st.Acquire(ctx, stores.PartitionLease("s", 0), "test", time.Minute, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	recs, err := st.Claim(ctx, stores.ClaimRequest{Session: "s", Token: le.Token, Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	newest := map[string]string{"hb/dev-0/status": "39", "hb/dev-1/status": "40", "hb/dev-2/status": "38"}
	if len(recs) != len(newest) {
		t.Fatalf("claimed %d records, want one per key (%d)", len(recs), len(newest))
	}
	for _, r := range recs {
		want := `{"kind":"heartbeat","seq":` + newest[r.Envelope.Topic] + `}`
		if string(r.Envelope.Payload) != want {
			t.Errorf("%s: payload %s, want %s", r.Envelope.Topic, r.Envelope.Payload, want)
		}
	}
}
