package dynamodb

import (
	"context"
	"fmt"
	"regexp"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/gobridge/gobridge/stores"
)

var cursorRE = regexp.MustCompile(`^[0-9]{20}\.[0-9]{20}$`)

// ListDead implements stores.DeadLetters with one Query of the dead (all
// routes) or dead_route index, oldest first by (DeadAt, Seq). The cursor is
// the index sort key of the last record returned.
func (s *Store) ListDead(ctx context.Context, f stores.DeadFilter) ([]stores.Record, string, error) {
	if s.closed.Load() {
		return nil, "", errClosed
	}
	limit := f.Limit
	if limit <= 0 {
		limit = 100
	}
	if f.After != "" && !cursorRE.MatchString(f.After) {
		return nil, "", fmt.Errorf("dynamodb: list dead letters: %w: bad cursor %q", stores.ErrInvalid, f.After)
	}
	idx, hash, hv := idxDead, aDeadAll, "dead"
	if f.Route != "" {
		idx, hash, hv = idxDeadRoute, aDeadRoute, f.Route
	}
	cond := "#h = :h"
	vals := map[string]types.AttributeValue{":h": vS(hv)}
	names := map[string]string{"#h": hash}
	if f.After != "" {
		names["#sk"] = aDeadSK
		cond += " AND #sk > :after"
		vals[":after"] = vS(f.After)
	}
	items, _, err := s.queryPage(ctx, &dynamodb.QueryInput{
		TableName:                 aws.String(s.table),
		IndexName:                 aws.String(idx),
		KeyConditionExpression:    aws.String(cond),
		ExpressionAttributeNames:  names,
		ExpressionAttributeValues: vals,
	}, limit+1)
	if err != nil {
		return nil, "", fmt.Errorf("dynamodb: list dead letters: %w", err)
	}
	next := ""
	if len(items) > limit {
		items = items[:limit]
		next = getS(items[limit-1], aDeadSK)
	}
	out := make([]stores.Record, len(items))
	for i, it := range items {
		out[i] = decode(it)
	}
	return out, next, nil
}

// deadItem finds the dead letter with envelope ID id with one strongly
// consistent Query of the base table.
func (s *Store) deadItem(ctx context.Context, id string) (map[string]types.AttributeValue, error) {
	in := &dynamodb.QueryInput{
		TableName:                 aws.String(s.table),
		KeyConditionExpression:    aws.String("#pk = :pk"),
		FilterExpression:          aws.String("#state = :dead"),
		ExpressionAttributeNames:  map[string]string{"#pk": aPK, "#state": aState},
		ExpressionAttributeValues: map[string]types.AttributeValue{":pk": vS(recordPK(id)), ":dead": vS(string(stores.Dead))},
		ConsistentRead:            aws.Bool(true),
	}
	for {
		out, err := s.db.Query(ctx, in)
		if err != nil {
			return nil, err
		}
		if len(out.Items) > 0 {
			return out.Items[0], nil
		}
		if out.LastEvaluatedKey == nil {
			return nil, fmt.Errorf("%w: dead letter %q", stores.ErrNotFound, id)
		}
		in.ExclusiveStartKey = out.LastEvaluatedKey
	}
}

// GetDead implements stores.DeadLetters.
func (s *Store) GetDead(ctx context.Context, id string) (stores.Record, error) {
	if s.closed.Load() {
		return stores.Record{}, errClosed
	}
	it, err := s.deadItem(ctx, id)
	if err != nil {
		return stores.Record{}, fmt.Errorf("dynamodb: get dead letter: %w", err)
	}
	return decode(it), nil
}

// Requeue implements stores.DeadLetters: one Query, one Seq reservation and
// one TransactWriteItems (the dead letter becomes a tombstone, the new
// record is put, the route's live counter grows and its dead count
// shrinks).
func (s *Store) Requeue(ctx context.Context, id string, now time.Time) (stores.Record, error) {
	if s.closed.Load() {
		return stores.Record{}, errClosed
	}
	it, err := s.deadItem(ctx, id)
	if err != nil {
		return stores.Record{}, fmt.Errorf("dynamodb: requeue dead letter: %w", err)
	}
	r := stores.Requeued(decode(it), now)
	if r.Seq, err = s.nextSeq(ctx, 1); err != nil {
		return stores.Record{}, fmt.Errorf("dynamodb: requeue dead letter: %w", err)
	}
	item := newItem(&r, time.Time{})
	items := []types.TransactWriteItem{
		{Update: s.deadToDone(it)},
		{Put: &types.Put{
			TableName:           aws.String(s.table),
			Item:                item,
			ConditionExpression: aws.String("attribute_not_exists(pk)"),
		}},
		counterItem(s.table, r.Session, r.Route, 1, -1, []int{r.Partition}),
	}
	err = s.transact(ctx, items)
	if rs, ok := cancelReasons(err); ok && len(rs) > 0 && reasonCode(rs[0]) == codeCondition {
		return stores.Record{}, fmt.Errorf("dynamodb: requeue dead letter: %w: dead letter %q", stores.ErrNotFound, id)
	}
	if err != nil {
		return stores.Record{}, fmt.Errorf("dynamodb: requeue dead letter: %w", err)
	}
	return decode(item), nil
}

// DropDead implements stores.DeadLetters with one TransactWriteItems: the
// dead letter becomes a done tombstone (so re-appending its envelope stays
// a no-op) and its route's dead count shrinks.
func (s *Store) DropDead(ctx context.Context, id string) error {
	if s.closed.Load() {
		return errClosed
	}
	it, err := s.deadItem(ctx, id)
	if err != nil {
		return fmt.Errorf("dynamodb: drop dead letter: %w", err)
	}
	r := decode(it)
	err = s.transact(ctx, []types.TransactWriteItem{
		{Update: s.deadToDone(it)},
		counterItem(s.table, r.Session, r.Route, 0, -1, nil),
	})
	if rs, ok := cancelReasons(err); ok && len(rs) > 0 && reasonCode(rs[0]) == codeCondition {
		return fmt.Errorf("dynamodb: drop dead letter: %w: dead letter %q", stores.ErrNotFound, id)
	}
	if err != nil {
		return fmt.Errorf("dynamodb: drop dead letter: %w", err)
	}
	return nil
}

// deadToDone turns the dead letter it into a tombstone, if it is still dead.
func (s *Store) deadToDone(it map[string]types.AttributeValue) *types.Update {
	return &types.Update{
		TableName:                aws.String(s.table),
		Key:                      map[string]types.AttributeValue{aPK: it[aPK], aSK: it[aSK]},
		UpdateExpression:         aws.String(doneUpdate),
		ConditionExpression:      aws.String("#state = :dead"),
		ExpressionAttributeNames: map[string]string{"#state": aState, "#gc": aGC},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":dead": vS(string(stores.Dead)), ":done": vS(string(stores.Done)),
			":gc": vN(time.Now().Add(s.opts.DoneRetention).Unix()),
		},
	}
}
