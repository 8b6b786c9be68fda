package bridge

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gobridge/gobridge/internal/churn"
	"github.com/gobridge/gobridge/internal/testservices"
)

// seriesCount is how many series reg exports.
func seriesCount(t *testing.T, reg *prometheus.Registry) int {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, mf := range mfs {
		n += len(mf.GetMetric())
	}
	return n
}

// TestBridge_ReloadChurnLeavesNothingBehind reloads a running bridge
// hundreds of times, each time adding a route (with its own HTTP sender
// and outbox session, which delivers one message) and removing the one
// the previous reload added. Goroutines, heap, descriptors, metric series
// and the journal's routes must not grow with the number of reloads: what
// a removed part leaves behind is a leak in a process that runs for months.
func TestBridge_ReloadChurnLeavesNothingBehind(t *testing.T) {
	target := newSink(t)
	sender := func(id string) string {
		return fmt.Sprintf("{id: %s, type: http, options: {url: %q}}", id, target.srv.URL)
	}
	reloadChurn(t, sender, func(body string) bool {
		if target.count(body) == 0 {
			return false
		}
		target.mu.Lock() // the test's own record must not grow either
		clear(target.got)
		target.order = nil
		target.mu.Unlock()
		return true
	})
}

// TestBridge_ReloadChurnOfSQSSenders is the same with the added route's
// sender an SQS sender (fauxqs), whose AWS SDK client has its own HTTP
// transport.
func TestBridge_ReloadChurnOfSQSSenders(t *testing.T) {
	endpoint := testservices.SQSEndpoint(t)
	client := sqs.New(sqs.Options{Region: "us-east-1", BaseEndpoint: aws.String(endpoint), Credentials: aws.AnonymousCredentials{}})
	q, err := client.CreateQueue(t.Context(), &sqs.CreateQueueInput{QueueName: aws.String(fmt.Sprintf("churn-%d", time.Now().UnixNano()))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.DeleteQueue(context.Background(), &sqs.DeleteQueueInput{QueueUrl: q.QueueUrl}) })
	sender := func(id string) string {
		return fmt.Sprintf("{id: %s, type: sqs, options: {queue_url: %q, endpoint: %q, region: us-east-1}}", id, *q.QueueUrl, endpoint)
	}
	var b *Bridge
	reloadChurnBridge(t, sender, &b, func(i int) bool { return sessionStats(t, b, fmt.Sprintf("c%d", i)).Live == 0 })
}

// reloadChurn runs the reload churn (see TestBridge_ReloadChurnLeavesNothingBehind)
// with the added routes' senders made by sender; delivered says whether
// the round's message reached the target.
func reloadChurn(t *testing.T, sender func(id string) string, delivered func(body string) bool) {
	var b *Bridge
	reloadChurnBridge(t, sender, &b, func(i int) bool { return delivered(fmt.Sprintf("churn-%d", i)) })
}

func reloadChurnBridge(t *testing.T, sender func(id string) string, bp **Bridge, delivered func(i int) bool) {
	t.Helper()
	addr, db := freeAddr(t), filepath.Join(t.TempDir(), "outbox.db")
	stable := `
  - {id: stable, receiver: edge, topic: "stable/#", sender: s0, delivery_mode: shared_outbox,
     session: {id: s0, drain_strategy: {type: fixed_poll, interval: 50ms}}}`
	config := func(i int) string {
		senders := "  - " + sender("s0")
		routesYAML := stable
		if i >= 0 {
			senders += "\n  - " + sender(fmt.Sprintf("s%d", i+1))
			routesYAML += fmt.Sprintf(`
  - {id: r%d, receiver: edge, topic: "churn/%d", sender: s%d, delivery_mode: shared_outbox,
     session: {id: c%d, drain_strategy: {type: fixed_poll, interval: 10ms}}}`, i, i, i+1, i)
		}
		return fmt.Sprintf(`version: 1
bridge: {id: churn, admin: {listen: ""}, shutdown_timeout: 10s}
stores: {outbox: {type: sqlite, options: {path: %q}}}
receivers:
  - {id: edge, type: mqtt_listener, options: {listen: %q}, topics: [{topic: "#", qos: 1}]}
senders:
%s
routes:
%s
`, db, addr, senders, routesYAML)
	}
	reg := prometheus.NewRegistry()
	b, err := New(parseConfig(t, config(-1)), Options{Logger: testLogger(t), Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	*bp = b
	startRun(t, b)
	pub := publisher(t, "tcp://"+addr, "churn-pub")

	round := func(i int) {
		if i < 0 { // warm-up rounds get their own names too
			i = 1_000_000 - i
		}
		if err := b.Reload(t.Context(), parseConfig(t, config(i))); err != nil {
			t.Fatalf("reload %d: %v", i, err)
		}
		body := fmt.Sprintf("churn-%d", i)
		waitTokens(t, []paho.Token{pub.Publish(fmt.Sprintf("churn/%d", i), 1, false, body)}, time.Minute)
		waitFor(t, time.Minute, body+" delivered", func() bool { return delivered(i) })
		if err := b.Reload(t.Context(), parseConfig(t, config(-1))); err != nil {
			t.Fatalf("reload %d back: %v", i, err)
		}
	}
	counts := func() map[string]int {
		return map[string]int{"series": seriesCount(t, reg), "journal_routes": len(b.journal.Routes())}
	}
	n2 := 150
	if s := os.Getenv("CHURN_ROUNDS"); s != "" {
		n2, _ = strconv.Atoi(s)
	}
	churn.Check(t, n2/3, n2, churn.Tolerance{Goroutines: 10, FDs: 5, HeapBytes: 512 << 10}, counts, round)
}

// TestBridge_FlappingTargetLeavesNothingBehind has the target go down and
// up again every round, with a message on an outbox route and one on a
// direct_or_outbox route each time: sends fail, the sender goes down, is
// probed, comes back. Goroutines, heap, descriptors and metric series must
// not grow with the number of flaps (health, limiter, timers, the
// fallback's sticky keys).
func TestBridge_FlappingTargetLeavesNothingBehind(t *testing.T) {
	target := newSink(t)
	var refused atomic.Int64
	var down atomic.Bool
	target.fail = func(string) bool {
		if down.Load() {
			refused.Add(1)
			return true
		}
		return false
	}
	addr, db := freeAddr(t), filepath.Join(t.TempDir(), "outbox.db")
	reg := prometheus.NewRegistry()
	b, err := New(parseConfig(t, fmt.Sprintf(`version: 1
bridge: {id: flap, admin: {listen: ""}}
stores: {outbox: {type: sqlite, options: {path: %q}}}
receivers:
  - {id: edge, type: mqtt_listener, options: {listen: %q}, topics: [{topic: "#", qos: 1}]}
senders:
  - {id: t, type: http, options: {url: %q}}
routes:
  - {id: outbox, receiver: edge, topic: "o/#", sender: t, delivery_mode: shared_outbox,
     session: {id: so, drain_strategy: {type: fixed_poll, interval: 10ms}},
     policy: {backoff: {initial_interval: 1ms, max_interval: 20ms}}}
  - {id: direct, receiver: edge, topic: "d/#", sender: t, delivery_mode: direct_or_outbox,
     session: {id: sd, drain_strategy: {type: fixed_poll, interval: 10ms}},
     policy: {direct_timeout: 1s, backoff: {initial_interval: 1ms, max_interval: 20ms}}}
`, db, addr, target.srv.URL)), Options{Logger: slog.New(slog.DiscardHandler), Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	startRun(t, b)
	pub := publisher(t, "tcp://"+addr, "flap-pub")
	round := func(i int) {
		down.Store(true)
		before := refused.Load()
		o, d := fmt.Sprintf("o-%d", i), fmt.Sprintf("d-%d", i)
		toks := []paho.Token{pub.Publish(fmt.Sprintf("o/%d", i%50), 1, false, o), pub.Publish(fmt.Sprintf("d/%d", i%50), 1, false, d)}
		waitFor(t, time.Minute, fmt.Sprintf("refused sends in round %d (refused %d)", i, refused.Load()-before), func() bool { return refused.Load() >= before+3 })
		down.Store(false)
		waitTokens(t, toks, time.Minute)
		waitFor(t, time.Minute, "both delivered", func() bool { return target.count(o) > 0 && target.count(d) > 0 })
		target.mu.Lock()
		clear(target.got)
		target.order = nil
		target.mu.Unlock()
	}
	n2 := 300
	if s := os.Getenv("CHURN_ROUNDS"); s != "" {
		n2, _ = strconv.Atoi(s)
	}
	counts := func() map[string]int { return map[string]int{"series": seriesCount(t, reg)} }
	churn.Check(t, n2/3, n2, churn.Tolerance{Goroutines: 10, FDs: 5, HeapBytes: 512 << 10}, counts, round)
}
