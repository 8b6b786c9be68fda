package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gobridge/gobridge/internal/testservices"
	"github.com/gobridge/gobridge/message"
	"github.com/gobridge/gobridge/stores"
	"github.com/gobridge/gobridge/stores/dynamodb"
	"github.com/gobridge/gobridge/stores/sqlite"
)

// storeFixture is a config file naming an outbox store. A DynamoDB store
// stays open in the test (as other instances would hold it) while the
// commands run; a SQLite file is opened only around the test's own reads
// and writes, since an open store owns its file.
type storeFixture struct {
	cfg string
	db  string // the SQLite file
	st  stores.Store
}

// with runs fn on the fixture's store.
func (fx *storeFixture) with(t *testing.T, fn func(st stores.Store)) {
	t.Helper()
	if fx.st != nil {
		fn(fx.st)
		return
	}
	st, err := sqlite.Open(fx.db, sqlite.Options{Sync: "normal"})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	fn(st)
}

// getDead returns one dead letter of the fixture's store.
func (fx *storeFixture) getDead(t *testing.T, id string) (d stores.Record, err error) {
	t.Helper()
	fx.with(t, func(st stores.Store) {
		var recs []stores.Record
		if recs, _, err = st.Dead(t.Context(), stores.DeadQuery{ID: id}); err == nil {
			d = recs[0]
		}
	})
	return d, err
}

// listDead returns the dead letters of route (all routes when empty).
func (fx *storeFixture) listDead(t *testing.T, route string) (recs []stores.Record) {
	t.Helper()
	fx.with(t, func(st stores.Store) {
		var err error
		if recs, _, err = st.Dead(t.Context(), stores.DeadQuery{Route: route}); err != nil {
			t.Fatal(err)
		}
	})
	return recs
}

// newStoreFixture writes a config with an outbox of storeType (sqlite,
// memory or dynamodb) and opens that store.
func newStoreFixture(t *testing.T, storeType string) *storeFixture {
	t.Helper()
	dir := t.TempDir()
	db := filepath.Join(dir, "outbox.db")
	cfg := filepath.Join(dir, "bridge.yaml")
	fx := &storeFixture{cfg: cfg, db: db}
	var store string
	switch storeType {
	case "sqlite":
		store = fmt.Sprintf("outbox: {type: sqlite, options: {path: %q}}", db)
	case "dynamodb":
		endpoint := testservices.DynamoDBEndpoint(t)
		table := "gobridge_cli_" + strings.ReplaceAll(message.NewID(), "-", "")
		opts := dynamodb.Options{Table: table, Endpoint: endpoint, Region: "us-east-1", CreateTables: true}
		testservices.DropTablesAtCleanup(t, endpoint, table)
		st, err := dynamodb.Open(t.Context(), opts)
		if err != nil {
			t.Fatal(err)
		}
		fx.st = st
		o := fmt.Sprintf("{type: dynamodb, options: {table: %s, region: us-east-1, endpoint: %q}}", table, endpoint)
		store = "outbox: " + o
	default:
		store = "outbox: {type: " + storeType + "}"
	}
	if fx.st != nil {
		t.Cleanup(func() { _ = fx.st.Close() })
	}
	yaml := fmt.Sprintf(`version: 1
bridge: {id: test, admin: {listen: ""}}
stores:
  %s
receivers:
  - {id: edge, type: mqtt_listener, options: {listen: "127.0.0.1:0"}, topics: [{topic: "#", qos: 1}]}
senders:
  - {id: out, type: stdout}
routes:
  - {id: alarms, receiver: edge, topic: "a/#", sender: out, delivery_mode: shared_outbox, session: {id: plant}}
  - {id: telemetry, receiver: edge, topic: "t/#", sender: out, delivery_mode: shared_outbox, session: {id: plant}}
`, store)
	if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return fx
}

// dead appends n dead letters of route with payload and reason, dying one
// second apart starting at base; it returns their IDs.
func (fx *storeFixture) dead(t *testing.T, route string, n int, payload []byte, reason string, base time.Time) []string {
	t.Helper()
	recs := make([]stores.Record, n)
	ids := make([]string, n)
	for i := range recs {
		ids[i] = message.NewID()
		recs[i] = stores.Record{Session: "plant", Route: route, CreatedAt: base, Attempts: 1,
			State: stores.Dead, DeadReason: reason, DeadAt: base.Add(time.Duration(i) * time.Second),
			Envelope: message.Envelope{ID: ids[i], Topic: "a/1", Payload: payload, QoS: 1, ReceivedAt: base,
				Headers: map[string]string{"site": "7"}}}
	}
	fx.with(t, func(st stores.Store) {
		if err := st.Write(t.Context(), &stores.Batch{Append: recs}); err != nil {
			t.Fatal(err)
		}
	})
	return ids
}
