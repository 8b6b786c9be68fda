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

// ErrLayout is returned by Open when the table exists but does not have
// the layout of this version (see the package doc).
var ErrLayout = errors.New("dynamodb: table layout does not match")

// CreateTable creates the table (on-demand, pk and sk, TTL on ttl) unless
// one of that name exists, and waits until it is active. An existing table
// of this layout (ErrLayout otherwise) that lacks TTL, as a call
// interrupted while it waited leaves it, gets TTL on ttl.
func CreateTable(ctx context.Context, db *dynamodb.Client, name string) error {
	_, err := db.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName:   aws.String(name),
		BillingMode: types.BillingModePayPerRequest,
		KeySchema: []types.KeySchemaElement{
			{AttributeName: aws.String("pk"), KeyType: types.KeyTypeHash},
			{AttributeName: aws.String("sk"), KeyType: types.KeyTypeRange},
		},
		AttributeDefinitions: []types.AttributeDefinition{
			{AttributeName: aws.String("pk"), AttributeType: types.ScalarAttributeTypeS},
			{AttributeName: aws.String("sk"), AttributeType: types.ScalarAttributeTypeS},
		},
	})
	_, inUse := errors.AsType[*types.ResourceInUseException](err)
	if err != nil && !inUse {
		return fmt.Errorf("dynamodb: create table %s: %w", name, err)
	}
	w := dynamodb.NewTableExistsWaiter(db, func(o *dynamodb.TableExistsWaiterOptions) {
		o.MinDelay, o.MaxDelay = 100*time.Millisecond, 2*time.Second
	})
	if err := w.Wait(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(name)}, 5*time.Minute); err != nil {
		return fmt.Errorf("dynamodb: wait for table %s: %w", name, err)
	}
	if inUse {
		if err := checkLayout(ctx, db, name); err != nil {
			return err
		}
		ttl, err := db.DescribeTimeToLive(ctx, &dynamodb.DescribeTimeToLiveInput{TableName: aws.String(name)})
		if err != nil {
			return fmt.Errorf("dynamodb: describe ttl of %s: %w", name, err)
		}
		if d := ttl.TimeToLiveDescription; d != nil && d.TimeToLiveStatus != types.TimeToLiveStatusDisabled {
			return nil
		}
	}
	_, err = db.UpdateTimeToLive(ctx, &dynamodb.UpdateTimeToLiveInput{
		TableName:               aws.String(name),
		TimeToLiveSpecification: &types.TimeToLiveSpecification{AttributeName: aws.String("ttl"), Enabled: aws.Bool(true)},
	})
	if err != nil {
		return fmt.Errorf("dynamodb: enable ttl on %s: %w", name, err)
	}
	return nil
}

// checkLayout verifies that the table has the key schema pk (HASH, S), sk
// (RANGE, S) and no secondary index: a table made for the layout of an
// earlier gobridge (seven indexes, records keyed by envelope ID) is refused
// rather than misread.
func checkLayout(ctx context.Context, db *dynamodb.Client, name string) error {
	out, err := db.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(name)})
	if err != nil {
		return fmt.Errorf("dynamodb: describe table %s: %w", name, err)
	}
	t := out.Table
	defs := map[string]types.ScalarAttributeType{}
	for _, a := range t.AttributeDefinitions {
		defs[aws.ToString(a.AttributeName)] = a.AttributeType
	}
	ks := t.KeySchema
	if len(ks) != 2 || aws.ToString(ks[0].AttributeName) != "pk" || aws.ToString(ks[1].AttributeName) != "sk" ||
		defs["pk"] != types.ScalarAttributeTypeS || defs["sk"] != types.ScalarAttributeTypeS {
		return fmt.Errorf("%w: table %s needs the key schema pk (HASH, S), sk (RANGE, S); see the README section on DynamoDB", ErrLayout, name)
	}
	if len(t.GlobalSecondaryIndexes)+len(t.LocalSecondaryIndexes) > 0 {
		return fmt.Errorf("%w: table %s has secondary indexes: it was made for an earlier gobridge layout, which this version cannot read; create a new table (see the README section on DynamoDB)", ErrLayout, name)
	}
	return nil
}
