package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/gobridge/gobridge/internal/testservices"
	"github.com/gobridge/gobridge/stores"
	"github.com/gobridge/gobridge/stores/dynamodb"
	"github.com/gobridge/gobridge/stores/sqlite"
)

// sqliteStores is the stores block of a bridge with a SQLite outbox at path.
func sqliteStores(path string) string {
	return fmt.Sprintf("{outbox: {type: sqlite, options: {path: %q}}}", path)
}

// dynamoStores is the stores block of a bridge with a DynamoDB outbox and
// lease table named after run (created by gobridge against the emulator).
func dynamoStores(run, endpoint string) string {
	return fmt.Sprintf(`
  outbox: {type: dynamodb, options: {table: %[1]s-outbox, region: us-east-1, endpoint: %[2]q}}`, run, endpoint)
}

// outboxBridgeConfig is a one-route bridge: Mosquitto -> outbox (the
// stores block) -> the HTTP sink, with the given processors, sender headers
// and policy.
func outboxBridgeConfig(run, admin, storesBlock, mqttURL, sinkURL, processors, senderHeaders, policy string) string {
	return fmt.Sprintf(`version: 1
bridge:
  id: %[1]s
  admin: {listen: %[2]q}
  shutdown_timeout: 10s
  log: {level: info, format: text}
stores: %[3]s
receivers:
  - id: plant
    type: mqtt
    options: {broker_urls: [%[4]q], client_id: %[1]s, clean_session: false, keep_alive: 5s, connect_timeout: 2s}
    topics: [{topic: "%[1]s/#", qos: 1}]
senders:
  - id: sink
    type: http
    options:
      url: %[5]q
      timeout: 2s
      headers: %[7]s
routes:
  - id: r
    receiver: plant
    topic: "%[1]s/#"
    processors: %[6]s
    sender: sink
    delivery_mode: shared_outbox
    session: {id: s, drain_strategy: {type: fixed_poll, interval: 200ms}}
    policy: %[8]s
`, run, admin, storesBlock, mqttURL, sinkURL, processors, senderHeaders, policy)
}

// TestProcessors_ChainThroughRoute runs filter, transform, set_headers and
// idempotency_key on a shared_outbox route in a gobridge process: filtered
// messages never arrive, the transformed payload and a header set by
// set_headers arrive, and republished messages (same msg_id), before and
// after the first copy was delivered, are absorbed by the outbox.
func TestProcessors_ChainThroughRoute(t *testing.T) {
	needBinary(t)
	mqttURL := testservices.MQTTURL(t)
	run := runID("e2e-chain")
	s := newSink(t)
	admin := freeAddr(t)
	dir := t.TempDir()
	cfg := outboxBridgeConfig(run, admin, sqliteStores(dir+"/outbox.db"), mqttURL, s.srv.URL,
		`
      - {type: filter, expr: "payload != nil && payload.kind != 'debug'"}
      - {type: transform, expr: "{'temp_c': payload.temp, 'line': topic_segments[1], 'msg_id': payload.msg_id}"}
      - {type: set_headers, headers: {site: "{topic.1}", msg: "{payload.msg_id}"}}
      - {type: idempotency_key, from: "{payload.msg_id}"}`,
		`{Content-Type: application/json, X-Site: "{header.site}"}`,
		`{send_timeout: 2s}`)
	b := startBridge(t, dir, "chain", admin, cfg)
	b.waitReady(t, 30*time.Second)
	pub := publisher(t, mqttURL, run+"-pub")

	const good = 30
	type msg struct {
		Kind  string  `json:"kind"`
		MsgID string  `json:"msg_id"`
		Temp  float64 `json:"temp"`
	}
	var first, debug, again [][2]string
	for i := range good {
		topic := fmt.Sprintf("%s/line-%d/telemetry", run, i%3)
		body, _ := json.Marshal(msg{Kind: "reading", MsgID: fmt.Sprintf("m-%03d", i), Temp: float64(i)})
		first = append(first, [2]string{topic, string(body)})
		if i%3 == 0 { // republished: same msg_id, a later reading of it
			body, _ := json.Marshal(msg{Kind: "reading", MsgID: fmt.Sprintf("m-%03d", i), Temp: float64(i) + 0.5})
			again = append(again, [2]string{topic, string(body)})
		}
		if i%5 == 0 {
			body, _ := json.Marshal(msg{Kind: "debug", MsgID: fmt.Sprintf("d-%03d", i), Temp: -1})
			debug = append(debug, [2]string{topic, string(body)})
			debug = append(debug, [2]string{topic, "not json"})
		}
	}
	// Republish half the duplicates in the same burst (absorbed while the
	// first copy is pending or in flight) and the other half after every
	// first copy was delivered (absorbed by the delivered record's tombstone).
	burst := append(append(append([][2]string{}, first...), debug...), again[:len(again)/2]...)
	publishAll(t, pub, burst, 20*time.Second)
	waitFor(t, 20*time.Second, "every first copy delivered", func() bool {
		_, distinct := s.counts()
		return distinct >= good
	})
	publishAll(t, pub, again[len(again)/2:], 20*time.Second)

	total := len(burst) + len(again) - len(again)/2
	// The sink counts a delivery before the bridge counts it sent, and the
	// pending gauge is sampled once a second: the outbox itself is read, and
	// the last first copy's outcome awaited, not assumed to precede the
	// duplicates' acknowledgements.
	st, err := sqlite.Open(dir+"/outbox.db", sqlite.Options{ReadOnly: true}) // the bridge owns the file
	if err != nil {
		t.Fatalf("open the bridge's outbox: %v", err)
	}
	defer st.Close()
	waitFor(t, 20*time.Second, "every message settled, every first copy sent and the outbox empty", func() bool {
		return b.metric("gobridge_route_acked_total", `route="r"`) == float64(total) &&
			b.metric("gobridge_delivery_sent_total", `route="r"`) >= good && live(t, st, "s") == 0
	})
	if sent := b.metric("gobridge_delivery_sent_total", `route="r"`); sent != good {
		t.Errorf("gobridge_delivery_sent_total = %v, want %d", sent, good)
	}
	if f := b.metric("gobridge_route_filtered_total", `route="r"`); f != float64(len(debug)) {
		t.Errorf("gobridge_route_filtered_total = %v, want %d", f, len(debug))
	}

	got := s.deliveries()
	if len(got) != good {
		t.Errorf("sink got %d deliveries, want %d (one per msg_id)", len(got), good)
	}
	seen := map[string]bool{}
	for _, d := range got {
		if seen[d.key] {
			t.Errorf("msg_id %s delivered twice", d.key)
		}
		seen[d.key] = true
		var p struct {
			TempC float64 `json:"temp_c"`
			Line  string  `json:"line"`
			MsgID string  `json:"msg_id"`
		}
		if err := json.Unmarshal([]byte(d.body), &p); err != nil {
			t.Errorf("delivered body %q is not the transformed JSON: %v", d.body, err)
			continue
		}
		var i int
		if _, err := fmt.Sscanf(p.MsgID, "m-%d", &i); err != nil || d.key != p.MsgID {
			t.Errorf("delivered %q with Idempotency-Key %q: want a reading's msg_id as the key", d.body, d.key)
			continue
		}
		wantLine := fmt.Sprintf("line-%d", i%3)
		if p.Line != wantLine || p.TempC != float64(i) {
			t.Errorf("delivered %s, want line %s and temp_c %d (the first copy, transformed)", d.body, wantLine, i)
		}
		if site := d.headers.Get("X-Site"); site != wantLine {
			t.Errorf("%s: X-Site %q, want %q (set_headers site={topic.1})", p.MsgID, site, wantLine)
		}
	}
}

// TestCoalesce_SinkDown publishes many heartbeats for 3 keys while the HTTP
// target answers 503 with Retry-After: 5. The first heartbeat of each key is
// claimed at once, refused and released for 5 s; every later heartbeat
// replaces the pending record of its key (coalesce key "{topic}", SQLite
// outbox, then the same with a DynamoDB outbox). When the target returns it
// gets exactly one delivery per key, each the newest heartbeat, and no
// key's record was sent again within 5 s of its last refusal (a replacement
// must not turn a backed-off key into a due one).
func TestCoalesce_SinkDown(t *testing.T) {
	needBinary(t)
	t.Run("sqlite", func(t *testing.T) {
		testCoalesceSinkDown(t, outboxBackend{
			stores: func(run, dir string) string { return sqliteStores(dir + "/outbox.db") },
			open: func(t *testing.T, run, dir string) (outboxStats, error) {
				return sqlite.Open(dir+"/outbox.db", sqlite.Options{ReadOnly: true}) // the bridge owns the file
			},
		})
	})
	t.Run("dynamodb", func(t *testing.T) {
		ddb := testservices.DynamoDBEndpoint(t)
		testCoalesceSinkDown(t, outboxBackend{
			stores: func(run, dir string) string {
				testservices.DropTablesAtCleanup(t, ddb, run+"-outbox")
				return dynamoStores(run, ddb)
			},
			open: func(t *testing.T, run, dir string) (outboxStats, error) {
				return dynamodb.Open(t.Context(), dynamodb.Options{Table: run + "-outbox", Region: "us-east-1", Endpoint: ddb})
			},
		})
	})
}

// outboxStats is what the test reads of a running bridge's outbox store:
// the exact depth (the pending gauge is sampled once a second).
type outboxStats interface {
	Stats(ctx context.Context) ([]stores.SessionStats, error)
	Close() error
}

// live returns the live records of session in st.
func live(t *testing.T, st outboxStats, session string) int {
	t.Helper()
	all, err := st.Stats(t.Context())
	if err != nil {
		t.Fatalf("outbox stats: %v", err)
	}
	for _, ss := range all {
		if ss.Session == session {
			return ss.Live
		}
	}
	return 0
}

// outboxBackend is an outbox store a bridge runs on: its config block
// (called before the bridge starts) and a way for the test to open it.
type outboxBackend struct {
	stores func(run, dir string) string
	open   func(t *testing.T, run, dir string) (outboxStats, error)
}

func testCoalesceSinkDown(t *testing.T, be outboxBackend) {
	mqttURL := testservices.MQTTURL(t)
	run := runID("e2e-coalesce")
	s := newSink(t)
	s.retryAfter = "5" // seconds
	s.down.Store(true)
	admin := freeAddr(t)
	dir := t.TempDir()
	cfg := outboxBridgeConfig(run, admin, be.stores(run, dir), mqttURL, s.srv.URL,
		`[{type: coalesce, key: "{topic}"}]`, `{}`,
		// max_interval above the Retry-After: max_interval caps it.
		`{send_timeout: 2s, backoff: {initial_interval: 100ms, max_interval: 10s}}`)
	b := startBridge(t, dir, "coalesce", admin, cfg)
	b.waitReady(t, 30*time.Second)
	st, err := be.open(t, run, dir)
	if err != nil {
		t.Fatalf("open the bridge's outbox: %v", err)
	}
	defer st.Close()
	depth := func() int { return live(t, st, "s") }
	pub := publisher(t, mqttURL, run+"-pub")

	keys := []string{run + "/dev-a/heartbeat", run + "/dev-b/heartbeat", run + "/dev-c/heartbeat"}
	hb := func(key string, n int) [2]string { return [2]string{key, fmt.Sprintf(`{"dev":%q,"n":%d}`, key, n)} }
	var firstHB [][2]string
	for _, k := range keys {
		firstHB = append(firstHB, hb(k, 0))
	}
	publishAll(t, pub, firstHB, 20*time.Second)
	waitFor(t, 20*time.Second, "the first heartbeats refused by the sink", func() bool {
		return b.metric("gobridge_delivery_retried_total", `route="r"`, `outcome="capacity"`) >= float64(len(keys))
	})
	refusedFirst := s.refused.Load()

	const beats = 100
	var burst [][2]string
	for n := 1; n <= beats; n++ {
		for _, k := range keys {
			burst = append(burst, hb(k, n))
		}
	}
	publishAll(t, pub, burst, 20*time.Second)
	// Mosquitto acknowledged the publishes; gobridge has persisted them once
	// the route settled every one.
	waitFor(t, 20*time.Second, "every heartbeat persisted", func() bool {
		return b.metric("gobridge_route_acked_total", `route="r"`) == float64(len(keys)*(beats+1))
	})
	// The replaced records leave the outbox with the drainer's next commit
	// of outcomes (a DynamoDB Write of this burst takes some transactions).
	pendingAfterBurst := depth()
	for end := time.Now().Add(20 * time.Second); pendingAfterBurst != len(keys) && time.Now().Before(end); pendingAfterBurst = depth() {
		time.Sleep(50 * time.Millisecond)
	}
	refusedBurst := s.refused.Load() - refusedFirst
	s.down.Store(false)

	waitFor(t, 30*time.Second, "the outbox drained", func() bool { return depth() == 0 })
	got := s.deliveries()
	var bodies []string
	for _, d := range got {
		bodies = append(bodies, d.body)
	}
	t.Logf("%d heartbeats for %d keys while the sink was down (%d refused before the burst, %d during it; %d records pending after it) -> deliveries %q",
		len(keys)*(beats+1), len(keys), refusedFirst, refusedBurst, pendingAfterBurst, bodies)
	if pendingAfterBurst != len(keys) {
		t.Errorf("%d records pending after the burst, want %d: one per key", pendingAfterBurst, len(keys))
	}
	// A key's record may be sent again once the Retry-After of its last
	// refusal has passed (on a busy machine the burst outlasts it), never
	// before: a replacement inherits its key's due time. The sink answered
	// before the bridge computed that time, so the gap is at least 5 s
	// (less a margin for a store that keeps due times in milliseconds).
	last := map[string]time.Time{}
	for _, r := range s.refused503() {
		var hb struct{ Dev string }
		if err := json.Unmarshal([]byte(r.body), &hb); err != nil {
			t.Fatalf("refused request %q: %v", r.body, err)
		}
		if prev, ok := last[hb.Dev]; ok && r.at.Sub(prev) < 5*time.Second-100*time.Millisecond {
			t.Errorf("%s sent %v after its last 503 with Retry-After: 5: coalesced replacements were due at once", r.body, r.at.Sub(prev))
		}
		last[hb.Dev] = r.at
	}
	if len(got) != len(keys) {
		t.Errorf("sink got %d deliveries, want %d: one per key", len(got), len(keys))
	}
	newest := map[string]bool{}
	for _, k := range keys {
		newest[hb(k, beats)[1]] = true
	}
	for _, d := range got {
		if !newest[d.body] {
			t.Errorf("delivered %s, not the newest heartbeat of its key", d.body)
		}
		delete(newest, d.body)
	}
	if len(newest) != 0 {
		t.Errorf("newest heartbeats never delivered: %v", newest)
	}
}
