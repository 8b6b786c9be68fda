package dynamodb_test

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	awsddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/gobridge/gobridge/internal/testservices"
	"github.com/gobridge/gobridge/stores"
	"github.com/gobridge/gobridge/stores/dynamodb"
	"github.com/gobridge/gobridge/stores/storetest"
)

// One table per test binary (the suites name sessions and routes uniquely
// per test), deleted by TestMain.
var shared struct {
	once   sync.Once
	err    error
	client *awsddb.Client
	table  string
}

func TestMain(m *testing.M) {
	code := m.Run()
	dropDiffTable()
	if shared.client != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_, _ = shared.client.DeleteTable(ctx, &awsddb.DeleteTableInput{TableName: aws.String(shared.table)})
		cancel()
	}
	os.Exit(code)
}

// t0 is the tests' epoch.
var t0 = time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)

func uniqueName(prefix string) string {
	var b [6]byte
	_, _ = crand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// counter counts HTTP requests, so that benchmarks report round trips.
// With delay set, it holds each transaction back by up to delay before
// sending it, as a slow network would: the commits of concurrent
// processes then interleave in more ways.
// With hold set, it stops its first transaction before sending it: it
// reports on hold and waits to be released by a receive from it.
// With lose above 0, it counts transactions down: from the one it
// reaches 1 at, it loses their answers (an error instead, as when the
// connection drops after the request was sent; with unsent, before).
// With drop above 0, it fails one transaction attempt in drop before
// sending it, as a reused keep-alive connection that the server closed
// does: the SDK sends it again (same ClientRequestToken) after its
// backoff, which other processes' commits may have made refused.
type counter struct {
	n      atomic.Int64
	next   http.RoundTripper
	delay  time.Duration
	hold   chan struct{}
	held   atomic.Bool
	lose   atomic.Int64
	unsent atomic.Bool
	lost   atomic.Int64 // transactions whose answers it lost
	drop   int64
	tx     atomic.Int64 // transaction attempts, for drop
}

var errLost = errors.New("test: connection reset, the answer is lost")

func (c *counter) RoundTrip(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	tx := strings.HasSuffix(r.Header.Get("X-Amz-Target"), ".TransactWriteItems")
	if tx && c.hold != nil && c.held.CompareAndSwap(false, true) {
		c.hold <- struct{}{} // held
		c.hold <- struct{}{} // released
	}
	if c.delay > 0 && tx {
		t := time.NewTimer(rand.N(c.delay))
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			return nil, r.Context().Err()
		}
	}
	if tx && c.drop > 0 && c.tx.Add(1)%c.drop == 0 {
		return nil, errLost
	}
	if !tx || c.lose.Load() == 0 || c.lose.Add(-1) > 0 {
		return c.next.RoundTrip(r)
	}
	c.lose.Store(1)
	c.lost.Add(1)
	if !c.unsent.Load() {
		res, err := c.next.RoundTrip(r)
		if err != nil {
			return nil, err
		}
		_, _ = io.Copy(io.Discard, res.Body) // read, so that the connection stays usable
		res.Body.Close()
	}
	return nil, errLost
}

// newClient returns a DynamoDB Local client whose requests cnt counts (cnt
// may be nil), with opts applied. Each call makes a client of its own, as
// a process would.
func newClient(t testing.TB, cnt *counter, opts ...func(*awsddb.Options)) *awsddb.Client {
	t.Helper()
	endpoint := testservices.DynamoDBEndpoint(t)
	cfg, err := config.LoadDefaultConfig(context.Background(), config.WithRegion("us-east-1"))
	if err != nil {
		t.Fatal(err)
	}
	return awsddb.NewFromConfig(cfg, func(o *awsddb.Options) {
		o.BaseEndpoint = aws.String(endpoint)
		o.DisableValidateResponseChecksum = true
		if cnt != nil {
			cnt.next = http.DefaultTransport
			o.HTTPClient = &http.Client{Transport: cnt}
		}
		for _, f := range opts {
			f(o)
		}
	})
}

// sharedTable creates the binary's table on first use.
func sharedTable(t testing.TB) string {
	t.Helper()
	c := newClient(t, nil)
	shared.once.Do(func() {
		shared.table = uniqueName("gobridge_test_")
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		shared.err = dynamodb.CreateTable(ctx, c, shared.table)
		if shared.err == nil {
			shared.client = c
		}
	})
	if shared.err != nil {
		t.Fatalf("create table: %v", shared.err)
	}
	return shared.table
}

// open returns a new Store (with a client of its own, opts applied) on the
// shared table.
func open(t testing.TB, cnt *counter, opts ...func(*awsddb.Options)) *dynamodb.Store {
	t.Helper()
	table := sharedTable(t)
	s, err := dynamodb.Open(context.Background(), dynamodb.Options{Table: table, Client: newClient(t, cnt, opts...)})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestStore(t *testing.T) {
	t.Parallel()
	storetest.Run(t, storetest.Features{
		Reopen: func(t *testing.T, s stores.Store) stores.Store {
			s.Close()
			return open(t, nil)
		},
	}, func(t *testing.T) stores.Store { return open(t, nil) })
}
