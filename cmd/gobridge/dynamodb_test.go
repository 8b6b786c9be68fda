package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/gobridge/gobridge/internal/testservices"
	"github.com/gobridge/gobridge/message"
	"github.com/gobridge/gobridge/stores"
	"github.com/gobridge/gobridge/stores/dynamodb"
)

// writeDynamoConfig writes a config whose outbox is the given DynamoDB
// Local table.
func writeDynamoConfig(t *testing.T, endpoint, outbox string) string {
	t.Helper()
	cfg := filepath.Join(t.TempDir(), "bridge.yaml")
	yaml := fmt.Sprintf(`version: 1
bridge: {id: test, admin: {listen: ""}}
stores:
  outbox: {type: dynamodb, options: {table: %s, region: us-east-1, endpoint: %q}}
receivers:
  - {id: edge, type: mqtt_listener, options: {listen: "127.0.0.1:0"}, topics: [{topic: "#", qos: 1}]}
senders:
  - {id: out, type: stdout}
routes:
  - {id: alarms, receiver: edge, topic: "a/#", sender: out, delivery_mode: shared_outbox, session: {id: plant}}
`, outbox, endpoint)
	if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return cfg
}

func TestDynamoDBCommand_CreateTables(t *testing.T) {
	endpoint := testservices.DynamoDBEndpoint(t)
	suffix := strings.ReplaceAll(message.NewID(), "-", "")
	outbox := "gobridge_ct_outbox_" + suffix
	opts := dynamodb.Options{Table: outbox, Endpoint: endpoint, Region: "us-east-1"}
	client, err := dynamodb.NewClient(t.Context(), opts)
	if err != nil {
		t.Fatal(err)
	}
	testservices.DropTablesAtCleanup(t, endpoint, outbox)
	cfg := writeDynamoConfig(t, endpoint, outbox)

	// Before: Open (without CreateTables, as against AWS) finds no table.
	if _, err := dynamodb.Open(t.Context(), opts); err == nil {
		t.Fatal("Open before create-tables succeeded; want a missing-table error")
	}
	for i := range 2 { // the second run finds the tables and changes nothing
		var stdout, stderr bytes.Buffer
		if code := run(t.Context(), []string{"dynamodb", "create-tables", "-c", cfg}, &stdout, &stderr); code != exitOK {
			t.Fatalf("run %d: exit %d, stderr:\n%s", i, code, stderr.String())
		}
		want := "outbox table " + outbox + " (records and leases): ready\n"
		if stdout.String() != want {
			t.Errorf("run %d: stdout = %q, want %q", i, stdout.String(), want)
		}
	}

	// After: the outbox opens with its layout check and works (records and
	// leases); TTL is on.
	st, err := dynamodb.Open(t.Context(), opts)
	if err != nil {
		t.Fatalf("Open after create-tables: %v", err)
	}
	defer st.Close()
	now := time.Now()
	rec := stores.Record{Session: "plant", Route: "alarms", CreatedAt: now,
		Envelope: message.Envelope{ID: message.NewID(), Topic: "a/1", QoS: 1, ReceivedAt: now}}
	if err := st.Write(t.Context(), &stores.Batch{Append: []stores.Record{rec}}); err != nil {
		t.Fatalf("Write: %v", err)
	}
	ttl, err := client.DescribeTimeToLive(t.Context(), &awsddb.DescribeTimeToLiveInput{TableName: aws.String(outbox)})
	if err != nil || ttl.TimeToLiveDescription == nil || aws.ToString(ttl.TimeToLiveDescription.AttributeName) != "ttl" {
		t.Errorf("TTL of %s = %+v, %v; want on ttl", outbox, ttl, err)
	}
	if _, err := st.Acquire(t.Context(), "p0", "me", time.Minute, now); err != nil {
		t.Errorf("Acquire on the created table: %v", err)
	}
}

func TestDynamoDBCommand_CreateTablesRejectsAnExistingTableWithoutIndexes(t *testing.T) {
	endpoint := testservices.DynamoDBEndpoint(t)
	table := "gobridge_ct_bare_" + strings.ReplaceAll(message.NewID(), "-", "")
	opts := dynamodb.Options{Table: table, Endpoint: endpoint, Region: "us-east-1"}
	client, err := dynamodb.NewClient(t.Context(), opts)
	if err != nil {
		t.Fatal(err)
	}
	testservices.DropTablesAtCleanup(t, endpoint, table)
	// A table with another key schema where the outbox should be.
	if _, err := client.CreateTable(t.Context(), &awsddb.CreateTableInput{
		TableName: aws.String(table), BillingMode: types.BillingModePayPerRequest,
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("id"), KeyType: types.KeyTypeHash}},
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("id"), AttributeType: types.ScalarAttributeTypeS}},
	}); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	cmd := &DynamoDBCommand{Stdout: &stdout, Stderr: &stderr}
	err = cmd.Run(t.Context(), []string{"create-tables", "-c", writeDynamoConfig(t, endpoint, table)})
	if !errors.Is(err, dynamodb.ErrLayout) {
		t.Fatalf("Run = %v, want ErrLayout", err)
	}
}

func TestDynamoDBCommand_Usage(t *testing.T) {
	cases := []struct {
		args []string
		code int
	}{
		{[]string{"dynamodb"}, exitUsage},
		{[]string{"dynamodb", "drop-tables"}, exitUsage},
		{[]string{"dynamodb", "create-tables"}, exitUsage},
		{[]string{"dynamodb", "create-tables", "-c", "x.yaml", "extra"}, exitUsage},
		{[]string{"dynamodb", "-h"}, exitOK},
		{[]string{"dynamodb", "create-tables", "-h"}, exitOK},
	}
	for _, c := range cases {
		var stdout, stderr bytes.Buffer
		if code := run(t.Context(), c.args, &stdout, &stderr); code != c.code {
			t.Errorf("%v: exit %d, want %d; stderr:\n%s", c.args, code, c.code, stderr.String())
		}
	}
}

func TestDynamoDBCommand_NoDynamoDBStore(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "bridge.yaml")
	yaml := `version: 1
bridge: {id: test, admin: {listen: ""}}
receivers:
  - {id: edge, type: mqtt_listener, options: {listen: "127.0.0.1:0"}, topics: [{topic: "#", qos: 1}]}
senders:
  - {id: out, type: stdout}
routes:
  - {id: alarms, receiver: edge, topic: "a/#", sender: out}
`
	if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	err := (&DynamoDBCommand{Stdout: &bytes.Buffer{}, Stderr: &bytes.Buffer{}}).Run(t.Context(), []string{"create-tables", "-c", cfg})
	if !errors.Is(err, errNoDynamoDB) {
		t.Fatalf("Run = %v, want errNoDynamoDB", err)
	}
}

func TestOutbox_StatsPerRouteOnDynamoDB(t *testing.T) {
	fx := newStoreFixture(t, "dynamodb")
	fillStats(t, fx)
	// While the command samples, another instance delivers two of the
	// three live records: the rate is positive and the backlog's end near.
	type result struct {
		code     int
		out, err string
	}
	done := make(chan result, 1)
	sampled, settled := make(chan struct{}), make(chan struct{})
	release := sync.OnceFunc(func() { close(settled) })
	afterFirstSample = func() { close(sampled); <-settled }
	t.Cleanup(func() { release(); afterFirstSample = func() {} })
	go func() {
		code, out, errOut := gobridge(t, "outbox", "stats", "-c", fx.cfg, "--sample", "1s")
		done <- result{code, out, errOut}
	}()
	select {
	case <-sampled:
	case r := <-done:
		t.Fatalf("outbox stats ended before its first sample: exit %d: %s", r.code, r.err)
	}
	fx.with(t, func(st stores.Store) {
		le, err := st.Acquire(t.Context(), stores.PartitionLease("plant", 0), "other-instance", time.Minute, time.Now().Add(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		recs, err := st.Claim(t.Context(), stores.ClaimRequest{Session: "plant", Token: le.Token, Limit: 2})
		if err != nil || len(recs) != 2 {
			t.Fatalf("claim: %d %v", len(recs), err)
		}
		b := stores.Batch{}
		for _, r := range recs {
			b.Settle = append(b.Settle, stores.Settlement{Key: r.Key(), Token: le.Token, Outcome: stores.Done})
		}
		if err := st.Write(t.Context(), &b); err != nil {
			t.Fatal(err)
		}
	})
	release()
	r := <-done
	if r.code != exitOK {
		t.Fatalf("exit %d: %s", r.code, r.err)
	}
	lines := strings.Split(strings.TrimSpace(r.out), "\n")
	if len(lines) != 4 || !strings.Contains(lines[1], "alarms") {
		t.Fatalf("table:\n%s", r.out)
	}
	f := strings.Fields(lines[1])
	if len(f) != 7 || f[2] != "1" || f[4] != "2" || !strings.HasSuffix(f[5], "/s") || f[5] == "0.0/s" || f[6] == "-" {
		t.Errorf("alarms row = %q, want 1 live, a positive rate and a time to empty", lines[1])
	}
}

// A create-tables interrupted while it waited for the new table (Ctrl-C,
// a timeout: a minute or two on AWS) left the table without TTL; the next
// run must finish the job, or tombstones never expire and the table grows
// without bound.
func TestDynamoDBCommand_CreateTablesFinishesAnInterruptedRun(t *testing.T) {
	endpoint := testservices.DynamoDBEndpoint(t)
	table := "gobridge_ct_half_" + strings.ReplaceAll(message.NewID(), "-", "")
	client, err := dynamodb.NewClient(t.Context(), dynamodb.Options{Table: table, Endpoint: endpoint, Region: "us-east-1"})
	if err != nil {
		t.Fatal(err)
	}
	testservices.DropTablesAtCleanup(t, endpoint, table)
	// What the interrupted run did: CreateTable (the layout is right), and
	// no UpdateTimeToLive.
	keys := []types.KeySchemaElement{{AttributeName: aws.String("pk"), KeyType: types.KeyTypeHash},
		{AttributeName: aws.String("sk"), KeyType: types.KeyTypeRange}}
	attrs := []types.AttributeDefinition{{AttributeName: aws.String("pk"), AttributeType: types.ScalarAttributeTypeS},
		{AttributeName: aws.String("sk"), AttributeType: types.ScalarAttributeTypeS}}
	if _, err := client.CreateTable(t.Context(), &awsddb.CreateTableInput{TableName: aws.String(table),
		BillingMode: types.BillingModePayPerRequest, KeySchema: keys, AttributeDefinitions: attrs}); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	if code := run(t.Context(), []string{"dynamodb", "create-tables", "-c", writeDynamoConfig(t, endpoint, table)}, &stdout, &stderr); code != exitOK {
		t.Fatalf("exit %d, stderr:\n%s", code, stderr.String())
	}
	ttl, err := client.DescribeTimeToLive(t.Context(), &awsddb.DescribeTimeToLiveInput{TableName: aws.String(table)})
	if err != nil || ttl.TimeToLiveDescription == nil || ttl.TimeToLiveDescription.TimeToLiveStatus != types.TimeToLiveStatusEnabled {
		t.Fatalf("after create-tables finished an interrupted run, TTL of %s = %+v, %v; want enabled on ttl", table, ttl.TimeToLiveDescription, err)
	}
}
