package dynamodb

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/gobridge/gobridge/stores"
)

// Dead implements stores.Store. A route's dead letters are one item
// collection sorted by DeadAt then Seq: a page is one Query (Limit+1 items
// after the cursor). Without a route, the routes that ever had dead letters
// come from the registry and each is queried the same way, the pages merged.
// By ID: one Query of the ID's key items (one per session and route),
// then a read of those that are dead letters.
func (s *Store) Dead(ctx context.Context, q stores.DeadQuery) ([]stores.Record, string, error) {
	start := ""
	if q.After != "" {
		at, seq, err := stores.ParseDeadCursor(q.After)
		if err != nil {
			return nil, "", err
		}
		start = deadPrefix(at, seq) + "/" // after every letter at (at, seq): '/' sorts after '.'
	}
	limit := q.Limit
	if limit <= 0 {
		limit = 100
	}
	if err := s.check(ctx); err != nil {
		return nil, "", err
	}
	var all []stores.Record
	var err error
	if q.ID != "" {
		all, err = s.deadByID(ctx, q.ID, q.Route, start)
		if err == nil && len(all) == 0 {
			return nil, "", stores.ErrNotFound
		}
	} else {
		routes := []string{q.Route}
		if q.Route == "" {
			routes = nil
			err = s.registered(ctx, "r#", func(it map[string]types.AttributeValue) { routes = append(routes, getS(it, aName)) })
		}
		for i := 0; err == nil && i < len(routes); i++ {
			err = s.deadPage(ctx, routes[i], start, limit+1, &all)
		}
	}
	if err != nil {
		return nil, "", fmt.Errorf("dynamodb: dead letters: %w", err)
	}
	slices.SortFunc(all, func(a, b stores.Record) int {
		return cmp.Or(cmp.Compare(nanos(a.DeadAt), nanos(b.DeadAt)), cmp.Compare(a.Seq, b.Seq))
	})
	if len(all) > limit {
		all = all[:limit]
		return all, stores.DeadCursor(&all[limit-1]), nil
	}
	return all, "", nil
}

// deadPage appends up to limit dead letters of route after start.
func (s *Store) deadPage(ctx context.Context, route, start string, limit int, out *[]stores.Record) error {
	cond := "#pk = :pk"
	vals := map[string]types.AttributeValue{":pk": vS(deadPK(route))}
	names := map[string]string{"#pk": aPK}
	if start != "" {
		cond += " AND #sk > :start"
		vals[":start"], names["#sk"] = vS(start), aSK
	}
	n := 0
	return s.query(ctx, &dynamodb.QueryInput{
		KeyConditionExpression: aws.String(cond), ExpressionAttributeNames: names, ExpressionAttributeValues: vals,
		ConsistentRead: aws.Bool(true), Limit: aws.Int32(int32(min(limit, 1000))),
	}, func(it map[string]types.AttributeValue) bool {
		*out = append(*out, decode(it, stores.Dead))
		n++
		return n < limit
	})
}

// deadByID returns the dead letters with envelope ID id (of route, when
// set) after start.
func (s *Store) deadByID(ctx context.Context, id, route, start string) ([]stores.Record, error) {
	var locs []map[string]types.AttributeValue
	err := s.query(ctx, &dynamodb.QueryInput{
		KeyConditionExpression:    aws.String("#pk = :pk"),
		ExpressionAttributeNames:  map[string]string{"#pk": aPK},
		ExpressionAttributeValues: map[string]types.AttributeValue{":pk": vS(keyPK(id))},
		ConsistentRead:            aws.Bool(true),
	}, func(it map[string]types.AttributeValue) bool {
		if getS(it, aState) == string(stores.Dead) && (route == "" || getS(it, aLocPK) == deadPK(route)) && getS(it, aLocSK) > start {
			locs = append(locs, loc(it))
		}
		return true
	})
	if err != nil {
		return nil, err
	}
	items, err := s.getItems(ctx, locs)
	var out []stores.Record
	for _, it := range items {
		out = append(out, decode(it, stores.Dead))
	}
	return out, err
}

// registered calls f with each registry item whose sort key starts with
// prefix ("r#": routes with dead letters, "s#": sessions).
func (s *Store) registered(ctx context.Context, prefix string, f func(map[string]types.AttributeValue)) error {
	return s.query(ctx, &dynamodb.QueryInput{
		KeyConditionExpression:    aws.String("#pk = :pk AND begins_with(#sk, :p)"),
		ExpressionAttributeNames:  map[string]string{"#pk": aPK, "#sk": aSK},
		ExpressionAttributeValues: map[string]types.AttributeValue{":pk": vS(regPK), ":p": vS(prefix)},
		ConsistentRead:            aws.Bool(true),
	}, func(it map[string]types.AttributeValue) bool {
		f(it)
		return true
	})
}
