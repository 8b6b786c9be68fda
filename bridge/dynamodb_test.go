package bridge

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/gobridge/gobridge/internal/testservices"
	"github.com/gobridge/gobridge/stores/dynamodb"
)

// dynamoStore returns the store config of a fresh DynamoDB Local table,
// deleted when the test ends. Call it before startBridge, so the table
// goes after the bridge stopped: DynamoDB Local keeps every table in its
// (shared, bounded) heap.
func dynamoStore(t *testing.T) string {
	t.Helper()
	endpoint := testservices.DynamoDBEndpoint(t)
	table := fmt.Sprintf("rt_outbox_%d", time.Now().UnixNano())
	client, err := dynamodb.NewClient(t.Context(), dynamodb.Options{Table: table, Region: "us-east-1", Endpoint: endpoint})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := client.DeleteTable(ctx, &awsddb.DeleteTableInput{TableName: aws.String(table)}); err != nil {
			t.Logf("delete table %s: %v", table, err)
		}
	})
	return fmt.Sprintf("{type: dynamodb, options: {table: %s, region: us-east-1, endpoint: %q}}", table, endpoint)
}

func TestBridge_SharedOutboxOnDynamoDB(t *testing.T) {
	t.Parallel()
	s := newSink(t)
	addr := freeAddr(t)
	cfg := parseConfig(t, listenerConfig(addr, "", dynamoStore(t),
		fmt.Sprintf(`  - {id: sink, type: http, options: {url: %q}}`, s.srv.URL), `
  - id: ddb
    receiver: edge
    topic: "#"
    sender: sink
    delivery_mode: shared_outbox
    session: {id: ddb, partitions: 2}`))
	startBridge(t, cfg)
	const n = 20
	publishRange(t, publisher(t, "tcp://"+addr, "ddb"), "line", 0, n)
	waitFor(t, 30*time.Second, "every message delivered from DynamoDB", func() bool { return s.distinct() == n })
}

// TestBridge_RetriedThenDeliveredLeavesNothingOnDynamoDB: a record that
// fails once and is delivered on a quick retry is settled twice before the
// writer's next commit (Retry, then Done). DynamoDB applied the first and
// called the second stale, so a delivered record stayed live, claimed by
// its drainer, which had forgotten it: pending never reached zero, and the
// next owner of the partition sent it again.
func TestBridge_RetriedThenDeliveredLeavesNothingOnDynamoDB(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	seen := map[string]int{}
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		seen[string(b)]++
		first := seen[string(b)] == 1
		mu.Unlock()
		if first {
			http.Error(w, "try again", http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(target.Close)
	addr := freeAddr(t)
	rt := startBridge(t, parseConfig(t, listenerConfig(addr, "", dynamoStore(t),
		fmt.Sprintf(`  - {id: sink, type: http, options: {url: %q}}`, target.URL), `
  - id: ddb
    receiver: edge
    topic: "#"
    sender: sink
    delivery_mode: shared_outbox
    session: {id: ddb}
    policy: {backoff: {initial_interval: 1ms, max_interval: 2ms}}`)))
	const n = 40
	publishRange(t, publisher(t, "tcp://"+addr, "ddb-retried"), "line", 0, n)
	delivered := func() int {
		mu.Lock()
		defer mu.Unlock()
		k := 0
		for _, c := range seen {
			k += min(c-1, 1)
		}
		return k
	}
	waitFor(t, time.Minute, "every message delivered on its second attempt", func() bool { return delivered() == n })
	live := -1
	waitFor(t, time.Minute, "no live record left in the outbox", func() bool {
		st, err := rt.Store().Stats(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		live = 0
		for _, s := range st {
			live += s.Live
		}
		return live == 0
	})
}
