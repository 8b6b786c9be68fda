package dynamodb

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/gobridge/gobridge/stores"
)

// oldestWindow is how many records at the head of each partition Stats
// reads for the oldest CreatedAt.
const oldestWindow = 100

// Stats implements stores.Store without scanning: one Query of the session
// registry, per session one Query of its stats shards (counts updated in
// the same transactions as the records), and per partition of a session
// with live records one Query of the first oldestWindow records for
// Oldest. Records enter a partition in about the order they were created,
// so the oldest is among them unless a record created long before was
// appended behind more than oldestWindow newer ones.
func (s *Store) Stats(ctx context.Context) ([]stores.SessionStats, error) {
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	parts := map[string][]string{}
	err := s.registered(ctx, "s#", func(it map[string]types.AttributeValue) {
		ns, _ := it[aParts].(*types.AttributeValueMemberNS)
		if ns != nil {
			parts[getS(it, aName)] = ns.Value
		}
	})
	if err != nil {
		return nil, fmt.Errorf("dynamodb: stats: %w", err)
	}
	var out []stores.SessionStats
	for session, ps := range parts {
		st, err := s.sessionStats(ctx, session, ps)
		if err != nil {
			return nil, fmt.Errorf("dynamodb: stats of session %q: %w", session, err)
		}
		if len(st.Routes) > 0 {
			out = append(out, st)
		}
	}
	slices.SortFunc(out, func(a, b stores.SessionStats) int { return cmp.Compare(a.Session, b.Session) })
	return out, nil
}

func (s *Store) sessionStats(ctx context.Context, session string, parts []string) (stores.SessionStats, error) {
	st := stores.SessionStats{Session: session, Routes: map[string]stores.RouteCounts{}}
	sums := map[string]*[3]int64{}
	err := s.query(ctx, &dynamodb.QueryInput{
		KeyConditionExpression:    aws.String("#pk = :pk"),
		ExpressionAttributeNames:  map[string]string{"#pk": aPK},
		ExpressionAttributeValues: map[string]types.AttributeValue{":pk": vS(statsPK(session))},
		ConsistentRead:            aws.Bool(true),
	}, func(it map[string]types.AttributeValue) bool {
		for name := range it {
			if i := []string{"l#", "b#", "d#"}; len(name) > 2 && slices.Contains(i, name[:2]) {
				if sums[name[2:]] == nil {
					sums[name[2:]] = &[3]int64{}
				}
				sums[name[2:]][slices.Index(i, name[:2])] += getN(it, name)
			}
		}
		return true
	})
	if err != nil {
		return st, err
	}
	for route, d := range sums {
		if d[0] != 0 || d[2] != 0 {
			st.Routes[route] = stores.RouteCounts{Live: int(d[0]), Dead: int(d[2])}
			st.Live += int(d[0])
			st.Bytes += d[1]
		}
	}
	if st.Live == 0 {
		return st, nil
	}
	for _, p := range parts {
		n, _ := strconv.Atoi(p)
		seen := 0
		err := s.query(ctx, &dynamodb.QueryInput{
			KeyConditionExpression:    aws.String("#pk = :pk AND #sk < :meta"),
			ProjectionExpression:      aws.String("#c"),
			ExpressionAttributeNames:  map[string]string{"#pk": aPK, "#sk": aSK, "#c": aCreated},
			ExpressionAttributeValues: map[string]types.AttributeValue{":pk": vS(partPK(session, n)), ":meta": vS(metaSK)},
			Limit:                     aws.Int32(oldestWindow),
		}, func(it map[string]types.AttributeValue) bool {
			if c := getT(it, aCreated); st.Oldest.IsZero() || c.Before(st.Oldest) {
				st.Oldest = c
			}
			seen++
			return seen < oldestWindow
		})
		if err != nil {
			return st, err
		}
	}
	return st, nil
}
