package dynamodb_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net/http"
	"os"
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

// One outbox table per test binary (the suites name sessions and routes
// uniquely per test), deleted by TestMain.
var (
	shared struct {
		once   sync.Once
		err    error
		client *awsddb.Client
		table  string
	}
)

func TestMain(m *testing.M) {
	code := m.Run()
	if shared.client != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_ = dynamodb.DeleteTable(ctx, shared.client, shared.table)
		cancel()
	}
	os.Exit(code)
}

func uniqueName(prefix string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// counter counts HTTP requests, so that benchmarks report requests per
// record rather than the emulator's speed.
type counter struct {
	n    atomic.Int64
	next http.RoundTripper
}

func (c *counter) RoundTrip(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return c.next.RoundTrip(r)
}

// newClient returns a DynamoDB Local client whose requests cnt counts (cnt
// may be nil).
func newClient(t testing.TB, cnt *counter) *awsddb.Client {
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
	})
}

// sharedTable creates the binary's outbox table on first use.
func sharedTable(t testing.TB) (*awsddb.Client, string) {
	t.Helper()
	c := newClient(t, nil)
	shared.once.Do(func() {
		shared.table = uniqueName("gobridge_test_")
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		shared.err = dynamodb.CreateOutboxTable(ctx, c, shared.table)
		if shared.err == nil {
			shared.client = c
		}
	})
	if shared.err != nil {
		t.Fatalf("create table: %v", shared.err)
	}
	return c, shared.table
}

func openStore(t testing.TB, client *awsddb.Client, table string) *dynamodb.Store {
	t.Helper()
	s, err := dynamodb.Open(context.Background(), dynamodb.Options{Table: table, Client: client})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return s
}

func newStore(t *testing.T) stores.Store {
	c, table := sharedTable(t)
	s := openStore(t, c, table)
	t.Cleanup(func() { s.Close() })
	return s
}

func newLeases(t *testing.T) stores.Leases {
	c, table := sharedTable(t)
	l, err := dynamodb.OpenLeases(t.Context(), dynamodb.Options{LeaseTable: table, Client: c})
	if err != nil {
		t.Fatalf("OpenLeases: %v", err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func TestStore_Conformance(t *testing.T) {
	storetest.RunWith(t, storetest.Features{
		Reopen: func(t *testing.T, s stores.Store) stores.Store {
			s.Close()
			return newStore(t)
		},
	}, newStore)
}

// TestStore_ConformancePerKeyClaims runs the suite again with ordering keys
// checked by one query per key (Claim's fallback when many records wait).
func TestStore_ConformancePerKeyClaims(t *testing.T) {
	storetest.Run(t, func(t *testing.T) stores.Store {
		s := newStore(t).(*dynamodb.Store)
		dynamodb.CheckKeysPerKey(s)
		return s
	})
}

func TestLeases_Conformance(t *testing.T) {
	storetest.RunLeasesWith(t, storetest.Features{
		ReopenLeases: func(t *testing.T, l stores.Leases) stores.Leases {
			l.Close()
			return newLeases(t)
		},
	}, newLeases)
}

func TestOpen_CreatesTablesThatWork(t *testing.T) {
	c := newClient(t, nil)
	table := uniqueName("gobridge_open_")
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = dynamodb.DeleteTable(ctx, c, table)
		_ = dynamodb.DeleteTable(ctx, c, table+"_leases")
	})
	opts := dynamodb.Options{
		Table: table, LeaseTable: table + "_leases", Region: "us-east-1",
		Endpoint: testservices.DynamoDBEndpoint(t), CreateTables: true,
	}
	s, err := dynamodb.Open(t.Context(), opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	l, err := dynamodb.OpenLeases(t.Context(), opts)
	if err != nil {
		t.Fatalf("OpenLeases: %v", err)
	}
	// Opening again finds the tables in place.
	if _, err := dynamodb.Open(t.Context(), opts); err != nil {
		t.Fatalf("second Open: %v", err)
	}
	r := stores.Record{Session: "s", Route: "r"}
	r.Envelope.ID = "id-1"
	if err := s.Append(t.Context(), r); err != nil {
		t.Fatalf("Append: %v", err)
	}
	if st, err := s.Stats(t.Context(), "s"); err != nil || st.Pending != 1 {
		t.Fatalf("Stats = %+v, %v; want 1 pending", st, err)
	}
	if _, err := l.Acquire(t.Context(), "s/0", "me", time.Minute, time.Now()); err != nil {
		t.Fatalf("Acquire: %v", err)
	}
}

func TestOpen_RejectsATableWithoutTheIndexes(t *testing.T) {
	c := newClient(t, nil)
	table := uniqueName("gobridge_bare_")
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = dynamodb.DeleteTable(ctx, c, table)
	})
	// A lease-style table (keys only) is not an outbox table.
	if err := dynamodb.CreateLeaseTable(t.Context(), c, table); err != nil {
		t.Fatal(err)
	}
	if _, err := dynamodb.Open(t.Context(), dynamodb.Options{Table: table, Client: c}); !errors.Is(err, dynamodb.ErrLayout) {
		t.Fatalf("Open on a table without indexes = %v, want ErrLayout", err)
	}
	if _, err := dynamodb.Open(t.Context(), dynamodb.Options{Table: uniqueName("gobridge_missing_"), Client: c}); err == nil {
		t.Fatal("Open on a missing table succeeded")
	}
}
