package dynamodb_test

import (
	"errors"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/gobridge/gobridge/internal/testservices"
	"github.com/gobridge/gobridge/message"
	"github.com/gobridge/gobridge/stores"
	"github.com/gobridge/gobridge/stores/dynamodb"
)

func TestOpen_CreatesATableThatWorks(t *testing.T) {
	t.Parallel()
	c := newClient(t, nil)
	table := uniqueName("gobridge_open_")
	testservices.DropTablesAtCleanup(t, testservices.DynamoDBEndpoint(t), table)
	opts := dynamodb.Options{Table: table, Region: "us-east-1", Endpoint: testservices.DynamoDBEndpoint(t), CreateTables: true}
	s, err := dynamodb.Open(t.Context(), opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	if _, err := dynamodb.Open(t.Context(), opts); err != nil {
		t.Fatalf("second Open (the table exists): %v", err)
	}
	ttl, err := c.DescribeTimeToLive(t.Context(), &awsddb.DescribeTimeToLiveInput{TableName: aws.String(table)})
	if err != nil || aws.ToString(ttl.TimeToLiveDescription.AttributeName) != "ttl" {
		t.Errorf("TTL = %+v, %v; want enabled on ttl", ttl, err)
	}
	b := stores.Batch{Append: []stores.Record{{Session: "s", Route: "r", Envelope: message.Envelope{ID: "id-1"}}}}
	if err := s.Write(t.Context(), &b); err != nil {
		t.Fatalf("Write: %v", err)
	}
	if st, err := s.Stats(t.Context()); err != nil || len(st) != 1 || st[0].Live != 1 {
		t.Fatalf("Stats = %+v, %v; want 1 live", st, err)
	}
}

func TestOpen_RefusesAnotherLayout(t *testing.T) {
	t.Parallel()
	c := newClient(t, nil)
	attr := func(n string, ty types.ScalarAttributeType) types.AttributeDefinition {
		return types.AttributeDefinition{AttributeName: aws.String(n), AttributeType: ty}
	}
	keys := func(h, r string) []types.KeySchemaElement {
		return []types.KeySchemaElement{{AttributeName: aws.String(h), KeyType: types.KeyTypeHash}, {AttributeName: aws.String(r), KeyType: types.KeyTypeRange}}
	}
	for name, in := range map[string]*awsddb.CreateTableInput{
		"other keys": {KeySchema: keys("id", "sk"), AttributeDefinitions: []types.AttributeDefinition{attr("id", "S"), attr("sk", "S")}},
		"numeric sk": {KeySchema: keys("pk", "sk"), AttributeDefinitions: []types.AttributeDefinition{attr("pk", "S"), attr("sk", "N")}},
		// The layout of gobridge before v2: indexes on the records.
		"old layout": {KeySchema: keys("pk", "sk"),
			AttributeDefinitions: []types.AttributeDefinition{attr("pk", "S"), attr("sk", "S"), attr("ready_pk", "S"), attr("seq", "N")},
			GlobalSecondaryIndexes: []types.GlobalSecondaryIndex{{IndexName: aws.String("ready"), KeySchema: keys("ready_pk", "seq"),
				Projection: &types.Projection{ProjectionType: types.ProjectionTypeAll}}}},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			in.TableName, in.BillingMode = aws.String(uniqueName("gobridge_bad_")), types.BillingModePayPerRequest
			if _, err := c.CreateTable(t.Context(), in); err != nil {
				t.Fatal(err)
			}
			testservices.DropTablesAtCleanup(t, testservices.DynamoDBEndpoint(t), *in.TableName)
			if _, err := dynamodb.Open(t.Context(), dynamodb.Options{Table: *in.TableName, Client: c}); !errors.Is(err, dynamodb.ErrLayout) {
				t.Fatalf("Open = %v, want ErrLayout", err)
			}
		})
	}
	if _, err := dynamodb.Open(t.Context(), dynamodb.Options{Table: uniqueName("gobridge_missing_"), Client: c}); err == nil {
		t.Fatal("Open of a missing table succeeded")
	}
}
