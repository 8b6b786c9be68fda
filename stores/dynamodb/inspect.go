package dynamodb

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/gobridge/gobridge/stores"
)

// Inspect implements stores.Inspector without scanning the table:
//
//   - one GetItem of the session registry;
//   - per session, one Query of its live# counters (live, dead and the
//     partitions used, per route) and one of its done# counters of the last
//     hour (to the minute: a completion counts while its minute overlaps
//     the hour before now);
//   - per partition of a session with live records, one Query of the timer
//     index (claimed records, and released ones waiting: their count is
//     Claimed, and Pending minus the not yet due ones is Due) and Queries
//     of the live index in Seq order until every live route of the session
//     has been seen (the oldest record per route; usually one page).
//
// Pending is the live count minus the claimed ones. Counters begin with
// this version: records appended, dead-lettered or completed by an earlier
// version are not in them, and a session is listed once this version has
// appended to it.
func (s *Store) Inspect(ctx context.Context, now time.Time) ([]stores.RouteStats, error) {
	if s.closed.Load() {
		return nil, errClosed
	}
	out, err := s.db.GetItem(ctx, &dynamodb.GetItemInput{
		TableName:      aws.String(s.table),
		Key:            map[string]types.AttributeValue{aPK: vS(registryPK), aSK: vS(registrySK)},
		ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return nil, fmt.Errorf("dynamodb: inspect: read session registry: %w", err)
	}
	var sessions []string
	if ss, ok := out.Item[aSessions].(*types.AttributeValueMemberSS); ok {
		sessions = slices.Sorted(slices.Values(ss.Value))
	}
	var all []stores.RouteStats
	for _, session := range sessions {
		rs, err := s.inspectSession(ctx, session, now)
		if err != nil {
			return nil, fmt.Errorf("dynamodb: inspect session %q: %w", session, err)
		}
		all = append(all, rs...)
	}
	return all, nil
}

// routeView accumulates one route's numbers while Inspect reads.
type routeView struct {
	live, dead, done, claimed, notDue int64
	oldest                            time.Time
}

func (s *Store) inspectSession(ctx context.Context, session string, now time.Time) ([]stores.RouteStats, error) {
	routes := make(map[string]*routeView)
	view := func(route string) *routeView {
		v := routes[route]
		if v == nil {
			v = &routeView{}
			routes[route] = v
		}
		return v
	}
	parts := make(map[int]bool)
	err := s.queryAll(ctx, &dynamodb.QueryInput{
		TableName:                aws.String(s.table),
		KeyConditionExpression:   aws.String("#pk = :pk AND begins_with(#sk, :live)"),
		ExpressionAttributeNames: map[string]string{"#pk": aPK, "#sk": aSK},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":pk": vS(counterPK(session)), ":live": vS(liveSKPrefix),
		},
		ConsistentRead: aws.Bool(true),
	}, func(it map[string]types.AttributeValue) {
		route, ok := routeOfCounter(getS(it, aSK))
		if !ok {
			return
		}
		v := view(route)
		v.live += getN(it, aValue)
		v.dead += getN(it, aDeadCount)
		if ns, ok := it[aParts].(*types.AttributeValueMemberNS); ok {
			for _, p := range ns.Value {
				if n, err := strconv.Atoi(p); err == nil {
					parts[n] = true
				}
			}
		}
	})
	if err != nil {
		return nil, fmt.Errorf("query counters: %w", err)
	}
	from := now.Add(-time.Hour).Unix() / 60
	to := now.Unix() / 60
	err = s.queryAll(ctx, &dynamodb.QueryInput{
		TableName:                aws.String(s.table),
		KeyConditionExpression:   aws.String("#pk = :pk AND #sk BETWEEN :from AND :to"),
		ExpressionAttributeNames: map[string]string{"#pk": aPK, "#sk": aSK},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":pk": vS(counterPK(session)), ":from": vS(fmt.Sprintf("%s%012d", doneSKPrefix, from)),
			":to": vS(fmt.Sprintf("%s%012d", doneSKPrefix, to+1)),
		},
		ConsistentRead: aws.Bool(true),
	}, func(it map[string]types.AttributeValue) {
		if m, route, ok := parseDoneSK(getS(it, aSK)); ok && m >= from && m <= to {
			view(route).done += getN(it, aValue)
		}
	})
	if err != nil {
		return nil, fmt.Errorf("query done counters: %w", err)
	}
	liveRoutes := 0
	for _, v := range routes {
		if v.live > 0 {
			liveRoutes++
		}
	}
	if liveRoutes > 0 {
		for _, p := range slices.Sorted(maps.Keys(parts)) {
			if err := s.inspectPartition(ctx, partPK(session, p), now, view); err != nil {
				return nil, err
			}
			if err := s.oldestPerRoute(ctx, partPK(session, p), routes, liveRoutes); err != nil {
				return nil, err
			}
		}
	}
	var out []stores.RouteStats
	for _, route := range slices.Sorted(maps.Keys(routes)) {
		v := routes[route]
		st := stores.RouteStats{
			Session: session, Route: route,
			Claimed: int(v.claimed), Dead: int(max(v.dead, 0)), DoneLastHour: int(v.done),
		}
		st.Pending = int(max(v.live-v.claimed, 0))
		st.Due = int(max(int64(st.Pending)-v.notDue, 0))
		if v.live > 0 {
			st.OldestPendingAt = v.oldest
		}
		if st.Pending == 0 && st.Claimed == 0 && st.Dead == 0 && st.DoneLastHour == 0 {
			continue
		}
		out = append(out, st)
	}
	return out, nil
}

// inspectPartition reads the partition's timer index: claimed records (a
// claim deadline) and released ones (their next attempt).
func (s *Store) inspectPartition(ctx context.Context, pp string, now time.Time, view func(string) *routeView) error {
	err := s.queryAll(ctx, &dynamodb.QueryInput{
		TableName:                 aws.String(s.table),
		IndexName:                 aws.String(idxTimer),
		KeyConditionExpression:    aws.String("#p = :p"),
		ProjectionExpression:      aws.String("#sk, #state, #t"),
		ExpressionAttributeNames:  map[string]string{"#p": aTimerPK, "#sk": aSK, "#state": aState, "#t": aTimerAt},
		ExpressionAttributeValues: map[string]types.AttributeValue{":p": vS(pp)},
	}, func(it map[string]types.AttributeValue) {
		_, route, ok := splitSK(getS(it, aSK))
		if !ok {
			return
		}
		switch stores.State(getS(it, aState)) {
		case stores.Claimed:
			view(route).claimed++
		case stores.Pending:
			if getN(it, aTimerAt) > nanos(now) {
				view(route).notDue++
			}
		}
	})
	if err != nil {
		return fmt.Errorf("query timer index: %w", err)
	}
	return nil
}

// oldestPerRoute reads the partition's live index in Seq order until every
// route with live records has been seen, and keeps each route's earliest
// CreatedAt.
func (s *Store) oldestPerRoute(ctx context.Context, pp string, routes map[string]*routeView, liveRoutes int) error {
	in := &dynamodb.QueryInput{
		TableName:                 aws.String(s.table),
		IndexName:                 aws.String(idxLive),
		KeyConditionExpression:    aws.String("#p = :p"),
		ExpressionAttributeNames:  map[string]string{"#p": aLivePK},
		ExpressionAttributeValues: map[string]types.AttributeValue{":p": vS(pp)},
	}
	seen := make(map[string]bool)
	for {
		out, err := s.db.Query(ctx, in)
		if err != nil {
			return fmt.Errorf("query live index: %w", err)
		}
		for _, it := range out.Items {
			_, route, ok := splitSK(getS(it, aSK))
			v := routes[route]
			if !ok || v == nil || v.live <= 0 || seen[route] {
				continue
			}
			seen[route] = true
			if c := getT(it, aCreated); v.oldest.IsZero() || c.Before(v.oldest) {
				v.oldest = c
			}
		}
		if out.LastEvaluatedKey == nil || len(seen) >= liveRoutes {
			return nil
		}
		in.ExclusiveStartKey = out.LastEvaluatedKey
	}
}

// queryAll runs a query to its end, calling f for every item.
func (s *Store) queryAll(ctx context.Context, in *dynamodb.QueryInput, f func(map[string]types.AttributeValue)) error {
	for {
		out, err := s.db.Query(ctx, in)
		if err != nil {
			return err
		}
		for _, it := range out.Items {
			f(it)
		}
		if out.LastEvaluatedKey == nil {
			return nil
		}
		in.ExclusiveStartKey = out.LastEvaluatedKey
	}
}
