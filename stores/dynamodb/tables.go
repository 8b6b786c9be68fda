package dynamodb

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Table layout (on-demand billing, key schema pk HASH S, sk RANGE S):
//
//	record   pk = "r#" + envelope ID, sk = len(session):session|route
//	counter  pk = "s#" + session,     sk = "live#<shard>#<route>" (live and dead counts)
//	done     pk = "s#" + session,     sk = "done#%012d#<shard>#<route>" (completions per minute)
//	registry pk = "meta#sessions",    sk = "meta"       (every session appended to)
//	seq      pk = "meta#seq",         sk = "meta"       (store-wide Seq counter)
//	lease    pk = "lease",            sk = lease name   (lease table)
//
// Sparse global secondary indexes on record items:
//
//	ready       (ready_pk S, seq N)          ALL        pending, due at append
//	timer       (timer_pk S, timer_at N)     ALL        claimed (deadline) or released (next attempt)
//	live        (live_pk S, seq N)           INCLUDE created_at   pending or claimed
//	okey        (key_pk S, seq N)            KEYS_ONLY  live, with an ordering key
//	coalesce    (co_pk S, received_at N)     INCLUDE part          pending (not while claimed)
//	dead        (dead_all S, dead_sk S)      ALL        dead letters, all routes
//	dead_route  (dead_rpk S, dead_sk S)      ALL        dead letters by route
//
// TTL is on gc_at (epoch seconds), set on done tombstones and done
// counters only.

func outboxTableInput(name string) *dynamodb.CreateTableInput {
	attr := func(n string, t types.ScalarAttributeType) types.AttributeDefinition {
		return types.AttributeDefinition{AttributeName: aws.String(n), AttributeType: t}
	}
	gsi := func(name, hash, rng string, p types.Projection) types.GlobalSecondaryIndex {
		return types.GlobalSecondaryIndex{
			IndexName: aws.String(name),
			KeySchema: []types.KeySchemaElement{
				{AttributeName: aws.String(hash), KeyType: types.KeyTypeHash},
				{AttributeName: aws.String(rng), KeyType: types.KeyTypeRange},
			},
			Projection: &p,
		}
	}
	all := types.Projection{ProjectionType: types.ProjectionTypeAll}
	keys := types.Projection{ProjectionType: types.ProjectionTypeKeysOnly}
	include := func(a ...string) types.Projection {
		return types.Projection{ProjectionType: types.ProjectionTypeInclude, NonKeyAttributes: a}
	}
	return &dynamodb.CreateTableInput{
		TableName:   aws.String(name),
		BillingMode: types.BillingModePayPerRequest,
		KeySchema: []types.KeySchemaElement{
			{AttributeName: aws.String(aPK), KeyType: types.KeyTypeHash},
			{AttributeName: aws.String(aSK), KeyType: types.KeyTypeRange},
		},
		AttributeDefinitions: []types.AttributeDefinition{
			attr(aPK, types.ScalarAttributeTypeS), attr(aSK, types.ScalarAttributeTypeS),
			attr(aReadyPK, types.ScalarAttributeTypeS), attr(aSeq, types.ScalarAttributeTypeN),
			attr(aTimerPK, types.ScalarAttributeTypeS), attr(aTimerAt, types.ScalarAttributeTypeN),
			attr(aLivePK, types.ScalarAttributeTypeS), attr(aKeyPK, types.ScalarAttributeTypeS),
			attr(aCoPK, types.ScalarAttributeTypeS), attr(aReceived, types.ScalarAttributeTypeN),
			attr(aDeadAll, types.ScalarAttributeTypeS), attr(aDeadRoute, types.ScalarAttributeTypeS),
			attr(aDeadSK, types.ScalarAttributeTypeS),
		},
		GlobalSecondaryIndexes: []types.GlobalSecondaryIndex{
			gsi(idxReady, aReadyPK, aSeq, all),
			gsi(idxTimer, aTimerPK, aTimerAt, all),
			gsi(idxLive, aLivePK, aSeq, include(aCreated)),
			gsi(idxOrderKey, aKeyPK, aSeq, keys),
			gsi(idxCoalesce, aCoPK, aReceived, include(aPart)),
			gsi(idxDead, aDeadAll, aDeadSK, all),
			gsi(idxDeadRoute, aDeadRoute, aDeadSK, all),
		},
	}
}

func leaseTableInput(name string) *dynamodb.CreateTableInput {
	return &dynamodb.CreateTableInput{
		TableName:   aws.String(name),
		BillingMode: types.BillingModePayPerRequest,
		KeySchema: []types.KeySchemaElement{
			{AttributeName: aws.String(aPK), KeyType: types.KeyTypeHash},
			{AttributeName: aws.String(aSK), KeyType: types.KeyTypeRange},
		},
		AttributeDefinitions: []types.AttributeDefinition{
			{AttributeName: aws.String(aPK), AttributeType: types.ScalarAttributeTypeS},
			{AttributeName: aws.String(aSK), AttributeType: types.ScalarAttributeTypeS},
		},
	}
}

// CreateOutboxTable creates the outbox table with its indexes and TTL
// unless a table of that name exists, and waits until it is active. It does
// not check the layout of an existing table.
func CreateOutboxTable(ctx context.Context, db *dynamodb.Client, name string) error {
	if err := createTable(ctx, db, outboxTableInput(name)); err != nil {
		return err
	}
	_, err := db.UpdateTimeToLive(ctx, &dynamodb.UpdateTimeToLiveInput{
		TableName: aws.String(name),
		TimeToLiveSpecification: &types.TimeToLiveSpecification{
			AttributeName: aws.String(aGC), Enabled: aws.Bool(true),
		},
	})
	if err != nil {
		// Enabling TTL twice fails; an existing table already has it.
		d, derr := db.DescribeTimeToLive(ctx, &dynamodb.DescribeTimeToLiveInput{TableName: aws.String(name)})
		if derr == nil && d.TimeToLiveDescription != nil &&
			aws.ToString(d.TimeToLiveDescription.AttributeName) == aGC {
			return nil
		}
		return fmt.Errorf("dynamodb: enable ttl on %s: %w", name, err)
	}
	return nil
}

// CreateLeaseTable creates the lease table unless it exists, and waits
// until it is active. A lease table may be the outbox table itself.
func CreateLeaseTable(ctx context.Context, db *dynamodb.Client, name string) error {
	return createTable(ctx, db, leaseTableInput(name))
}

func createTable(ctx context.Context, db *dynamodb.Client, in *dynamodb.CreateTableInput) error {
	name := aws.ToString(in.TableName)
	_, err := db.CreateTable(ctx, in)
	var inUse *types.ResourceInUseException
	if err != nil && !errors.As(err, &inUse) {
		return fmt.Errorf("dynamodb: create table %s: %w", name, err)
	}
	w := dynamodb.NewTableExistsWaiter(db, func(o *dynamodb.TableExistsWaiterOptions) {
		o.MinDelay = 100 * time.Millisecond
		o.MaxDelay = 2 * time.Second
	})
	if err := w.Wait(ctx, &dynamodb.DescribeTableInput{TableName: in.TableName}, 5*time.Minute); err != nil {
		return fmt.Errorf("dynamodb: wait for table %s: %w", name, err)
	}
	return nil
}

// DeleteTable deletes a table (tests use it to clean up).
func DeleteTable(ctx context.Context, db *dynamodb.Client, name string) error {
	_, err := db.DeleteTable(ctx, &dynamodb.DeleteTableInput{TableName: aws.String(name)})
	var nf *types.ResourceNotFoundException
	if err != nil && !errors.As(err, &nf) {
		return fmt.Errorf("dynamodb: delete table %s: %w", name, err)
	}
	return nil
}

// ErrLayout is returned by Open when the table exists but lacks an index
// gobridge needs (it was created for another version or by hand).
var ErrLayout = errors.New("dynamodb: table layout does not match")

// checkLayout verifies that table has the key schema and the indexes of
// outboxTableInput, so that a misconfigured table fails at startup and not
// at the first claim.
func checkLayout(ctx context.Context, db *dynamodb.Client, want *dynamodb.CreateTableInput) error {
	name := aws.ToString(want.TableName)
	out, err := db.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: want.TableName})
	if err != nil {
		return fmt.Errorf("dynamodb: describe table %s: %w", name, err)
	}
	t := out.Table
	if !sameKeys(t.KeySchema, want.KeySchema) {
		return fmt.Errorf("%w: table %s needs key schema pk (HASH, S), sk (RANGE, S)", ErrLayout, name)
	}
	have := make(map[string][]types.KeySchemaElement)
	for _, g := range t.GlobalSecondaryIndexes {
		have[aws.ToString(g.IndexName)] = g.KeySchema
	}
	for _, g := range want.GlobalSecondaryIndexes {
		ks, ok := have[aws.ToString(g.IndexName)]
		if !ok || !sameKeys(ks, g.KeySchema) {
			return fmt.Errorf("%w: table %s lacks index %s on (%s, %s); see the README section on DynamoDB for the layout",
				ErrLayout, name, aws.ToString(g.IndexName),
				aws.ToString(g.KeySchema[0].AttributeName), aws.ToString(g.KeySchema[1].AttributeName))
		}
	}
	return nil
}

func sameKeys(a, b []types.KeySchemaElement) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if aws.ToString(a[i].AttributeName) != aws.ToString(b[i].AttributeName) || a[i].KeyType != b[i].KeyType {
			return false
		}
	}
	return true
}
