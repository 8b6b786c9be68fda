package dynamodb

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/gobridge/gobridge/stores"
)

// Stats implements stores.Outbox without scanning: one strongly consistent
// Query of the session's live counters (a few shard items per partition,
// updated in the same transactions as appends and settles), then one Query
// (Limit 1) of the live index per partition with live records for the
// oldest one.
func (s *Store) Stats(ctx context.Context, session string) (stores.SessionStats, error) {
	var st stores.SessionStats
	in := &dynamodb.QueryInput{
		TableName:                 aws.String(s.table),
		KeyConditionExpression:    aws.String("#pk = :pk"),
		ExpressionAttributeNames:  map[string]string{"#pk": aPK},
		ExpressionAttributeValues: map[string]types.AttributeValue{":pk": vS(counterPK(session))},
		ConsistentRead:            aws.Bool(true),
	}
	live := make(map[int]int64)
	for {
		out, err := s.db.Query(ctx, in)
		if err != nil {
			return st, fmt.Errorf("dynamodb: stats: query counters: %w", err)
		}
		for _, it := range out.Items {
			live[int(getN(it, aPart))] += getN(it, aValue)
		}
		if out.LastEvaluatedKey == nil {
			break
		}
		in.ExclusiveStartKey = out.LastEvaluatedKey
	}
	oldestSeq := int64(-1)
	for _, p := range slices.Sorted(maps.Keys(live)) {
		if live[p] <= 0 {
			continue
		}
		st.Pending += int(live[p])
		out, err := s.db.Query(ctx, &dynamodb.QueryInput{
			TableName:                 aws.String(s.table),
			IndexName:                 aws.String(idxLive),
			KeyConditionExpression:    aws.String("#k = :k"),
			ExpressionAttributeNames:  map[string]string{"#k": aLivePK},
			ExpressionAttributeValues: map[string]types.AttributeValue{":k": vS(partPK(session, p))},
			Limit:                     aws.Int32(1),
		})
		if err != nil {
			return st, fmt.Errorf("dynamodb: stats: query live index: %w", err)
		}
		if len(out.Items) == 0 {
			continue
		}
		it := out.Items[0]
		if seq := getN(it, aSeq); oldestSeq < 0 || seq < oldestSeq {
			oldestSeq = seq
			st.OldestCreatedAt = getT(it, aCreated)
		}
	}
	return st, nil
}
