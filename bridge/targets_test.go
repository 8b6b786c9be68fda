package bridge

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/gobridge/gobridge/internal/testservices"
	"github.com/gobridge/gobridge/stores"
)

// outboxRoute is a shared_outbox route of every message to sender sink.
func outboxRoute(t *testing.T, addr, senderYAML string) *Bridge {
	t.Helper()
	store := fmt.Sprintf("{type: sqlite, options: {path: %q}}", filepath.Join(t.TempDir(), "outbox.db"))
	cfg := parseConfig(t, listenerConfig(addr, "", store, senderYAML, `
  - id: r
    receiver: edge
    topic: "#"
    sender: sink
    delivery_mode: shared_outbox
    session: {id: s1, drain_strategy: {type: fixed_poll, interval: 100ms}}
    policy: {max_replay_attempts: 1, replay_budget: 1s, backoff: {initial_interval: 100ms, max_interval: 1s}}`))
	b, err := New(cfg, Options{Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	startRun(t, b)
	return b
}

// A revoked credential is the target's failure (DESIGN.md §11.3): with the
// target answering 401 for a while, nothing is dead-lettered (although the
// poison rule's attempts and budget pass), and the target sees a probe per
// backoff step, not a request per record; once it accepts, every message
// is delivered.
func TestTargets_AnHTTP401OutageDeadLettersNothingAndIsProbed(t *testing.T) {
	t.Parallel()
	var unauthorized atomic.Bool
	unauthorized.Store(true)
	var during, delivered atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if unauthorized.Load() {
			during.Add(1)
			http.Error(w, "token expired", http.StatusUnauthorized)
			return
		}
		delivered.Add(1)
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	addr := freeAddr(t)
	b := outboxRoute(t, addr, fmt.Sprintf(`  - {id: sink, type: http, options: {url: %q}}`, srv.URL))
	pub := publisher(t, "tcp://"+addr, "t401")
	const n = 200
	var toks []paho.Token
	for i := range n {
		toks = append(toks, pub.Publish("line/1", 1, false, msgID(i)))
	}
	waitTokens(t, toks, 20*time.Second)
	time.Sleep(6 * time.Second) // the outage: past replay_budget, with many backoff steps
	requests := during.Load()
	unauthorized.Store(false)
	waitFor(t, 30*time.Second, "every message delivered after the outage", func() bool { return sessionStats(t, b, "s1").Live == 0 })
	if dead, _, _ := b.store.Dead(t.Context(), stores.DeadQuery{}); len(dead) != 0 {
		t.Fatalf("%d dead letters after a 401 outage, want none: %s", len(dead), dead[0].DeadReason)
	}
	if delivered.Load() < n {
		t.Fatalf("%d of %d delivered", delivered.Load(), n)
	}
	// Before the sender is marked down (3 failures), a first window of
	// sends goes out; after, one probe per step: 100ms doubling to 1s over
	// 6s is about 10. Far below one request per record (200).
	if requests > 40 {
		t.Errorf("%d requests during the outage for %d records: the target was not probed, it was hammered", requests, n)
	}
	t.Logf("%d requests during a 6 s outage of %d records", requests, n)
}

// A queue that does not exist yet is the target's failure too: the records
// wait (no dead letter) and are delivered once the queue is created.
func TestTargets_AnSQSQueueThatAppearsLaterGetsEveryMessage(t *testing.T) {
	t.Parallel()
	endpoint := testservices.SQSEndpoint(t)
	client := sqs.New(sqs.Options{Region: "us-east-1", BaseEndpoint: aws.String(endpoint), Credentials: aws.AnonymousCredentials{}})
	name := fmt.Sprintf("bridge-late-queue-%d", time.Now().UnixNano())
	// The server's queue URLs: learn their form from a queue made and
	// deleted at once.
	probe, err := client.CreateQueue(t.Context(), &sqs.CreateQueueInput{QueueName: aws.String(name + "-probe")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.DeleteQueue(t.Context(), &sqs.DeleteQueueInput{QueueUrl: probe.QueueUrl}); err != nil {
		t.Fatal(err)
	}
	queueURL := strings.TrimSuffix(*probe.QueueUrl, "-probe")
	addr := freeAddr(t)
	b := outboxRoute(t, addr, fmt.Sprintf(`  - {id: sink, type: sqs, options: {queue_url: %q, endpoint: %q, region: us-east-1}}`, queueURL, endpoint))
	pub := publisher(t, "tcp://"+addr, "tlate")
	const n = 30
	var toks []paho.Token
	for i := range n {
		toks = append(toks, pub.Publish("line/1", 1, false, msgID(i)))
	}
	waitTokens(t, toks, 20*time.Second)
	time.Sleep(3 * time.Second) // past replay_budget with the queue missing
	if dead, _, _ := b.store.Dead(t.Context(), stores.DeadQuery{}); len(dead) != 0 {
		t.Fatalf("%d dead letters while the queue did not exist, want none: %s", len(dead), dead[0].DeadReason)
	}
	out, err := client.CreateQueue(t.Context(), &sqs.CreateQueueInput{QueueName: aws.String(name)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.DeleteQueue(t.Context(), &sqs.DeleteQueueInput{QueueUrl: out.QueueUrl}) })
	waitFor(t, 30*time.Second, "every message delivered once the queue exists", func() bool { return sessionStats(t, b, "s1").Live == 0 })
	if dead, _, _ := b.store.Dead(t.Context(), stores.DeadQuery{}); len(dead) != 0 {
		t.Fatalf("%d dead letters, want none", len(dead))
	}
}
