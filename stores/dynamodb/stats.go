package dynamodb

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/gobridge/gobridge/stores"
)

// Stats implements stores.Outbox without scanning: one strongly consistent
// Query of the session's live counters (8 shard items per route, updated in the same
// transactions as appends and settles, which also record the partitions
// used), then one Query (Limit 1) of the live index per partition for the
// oldest record.
func (s *Store) Stats(ctx context.Context, session string) (stores.SessionStats, error) {
	if s.closed.Load() {
		return stores.SessionStats{}, errClosed
	}
	var st stores.SessionStats
	in := &dynamodb.QueryInput{
		TableName:                 aws.String(s.table),
		KeyConditionExpression:    aws.String("#pk = :pk AND begins_with(#sk, :live)"),
		ExpressionAttributeNames:  map[string]string{"#pk": aPK, "#sk": aSK},
		ExpressionAttributeValues: map[string]types.AttributeValue{":pk": vS(counterPK(session)), ":live": vS(liveSKPrefix)},
		ConsistentRead:            aws.Bool(true),
	}
	parts := make(map[int]bool)
	for {
		out, err := s.db.Query(ctx, in)
		if err != nil {
			return st, fmt.Errorf("dynamodb: stats: query counters: %w", err)
		}
		for _, it := range out.Items {
			st.Pending += int(getN(it, aValue))
			if ns, ok := it[aParts].(*types.AttributeValueMemberNS); ok {
				for _, v := range ns.Value {
					if p, err := strconv.Atoi(v); err == nil {
						parts[p] = true
					}
				}
			}
		}
		if out.LastEvaluatedKey == nil {
			break
		}
		in.ExclusiveStartKey = out.LastEvaluatedKey
	}
	if st.Pending <= 0 {
		return stores.SessionStats{}, nil
	}
	oldestSeq := int64(-1)
	for _, p := range slices.Sorted(maps.Keys(parts)) {
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
