package dynamodb

import (
	"context"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/gobridge/gobridge/stores"
)

// ownedCond holds while the record is claimed under :token. Records are
// named by their key (Session, Route, Envelope.ID) alone.
const ownedCond = "#state = :claimed AND #token = :token"

func ownedNames() map[string]string {
	return map[string]string{"#state": aState, "#token": aToken}
}

func ownedValues(r *stores.Record) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{
		":claimed": vS(string(stores.Claimed)), ":token": vN(r.Token),
	}
}

func staleErr(r *stores.Record) error {
	return fmt.Errorf("%w: record %s/%s/%s, token %d", stores.ErrStaleToken,
		r.Session, r.Route, r.Envelope.ID, r.Token)
}

// Complete implements stores.Outbox. Records become key-only tombstones
// (TTL removes them after Options.DoneRetention). It costs one
// TransactWriteItems per chunk of up to 100 items (records plus, per
// session and route, one live counter and one done-per-minute counter); a batch that fits one chunk is all or
// nothing. A larger batch is split, each chunk atomic: when a later chunk
// is stale, earlier chunks stay completed and the error is ErrStaleToken.
func (s *Store) Complete(ctx context.Context, recs ...stores.Record) error {
	if s.closed.Load() {
		return errClosed
	}
	seen := make(map[stores.Key]bool, len(recs))
	var uniq []stores.Record
	for _, r := range recs {
		if !seen[r.Key()] {
			seen[r.Key()] = true
			uniq = append(uniq, r)
		}
	}
	for len(uniq) > 0 {
		n, delta := 0, make(counters)
		for n < len(uniq) {
			r := &uniq[n]
			extra := 0
			if _, ok := delta[counterKey{r.Session, r.Route}]; !ok {
				extra = 2
			}
			if n+delta.maxItems()+extra+1 > maxTxItems {
				break
			}
			x := delta.get(r.Session, r.Route)
			x.live--
			x.done++
			n++
		}
		if err := s.completeChunk(ctx, uniq[:n], delta); err != nil {
			return fmt.Errorf("dynamodb: complete: %w", err)
		}
		uniq = uniq[n:]
	}
	return nil
}

func (s *Store) completeChunk(ctx context.Context, recs []stores.Record, delta counters) error {
	now := time.Now()
	gc := now.Add(s.opts.DoneRetention).Unix()
	items := make([]types.TransactWriteItem, 0, len(recs)+delta.maxItems())
	for i := range recs {
		r := &recs[i]
		names, vals := ownedNames(), ownedValues(r)
		names["#gc"] = aGC
		vals[":done"], vals[":gc"] = vS(string(stores.Done)), vN(gc)
		items = append(items, types.TransactWriteItem{Update: &types.Update{
			TableName:                 aws.String(s.table),
			Key:                       recordKey(r.Session, r.Route, r.Envelope.ID),
			UpdateExpression:          aws.String(doneUpdate),
			ConditionExpression:       aws.String(ownedCond),
			ExpressionAttributeNames:  names,
			ExpressionAttributeValues: vals,
		}})
	}
	items = append(items, delta.items(s.table, now)...)
	err := s.transact(ctx, items)
	if err == nil {
		return nil
	}
	if rs, ok := cancelReasons(err); ok {
		for i, r := range rs {
			if reasonCode(r) == codeCondition && i < len(recs) {
				return staleErr(&recs[i])
			}
		}
	}
	return err
}

// Release implements stores.Outbox with one conditional UpdateItem. The
// record stays in the timer index, due at next. A record with a CoalesceKey
// (as Claim returned it) is back in the coalesce index, and is settled
// against a pending record of its key appended while it was claimed (see
// releaseCoalesced), which costs one Query, one GetItem and a transaction.
func (s *Store) Release(ctx context.Context, rec stores.Record, next time.Time, lastError string) error {
	if s.closed.Load() {
		return errClosed
	}
	if rec.CoalesceKey != "" {
		done, err := s.releaseCoalesced(ctx, &rec, next, lastError)
		if err != nil || done {
			return err
		}
	}
	_, err := s.db.UpdateItem(ctx, releaseUpdate(s.table, &rec, next, lastError))
	if isConditionFailed(err) {
		return fmt.Errorf("dynamodb: release: %w", staleErr(&rec))
	}
	if err != nil {
		return fmt.Errorf("dynamodb: release: %w", err)
	}
	return nil
}

// DeadLetter implements stores.Outbox with one TransactWriteItems (the
// record and its route's live and dead counter). A record named by its key alone (Seq zero)
// costs one more, consistent, GetItem for its Seq, which orders the dead
// letters.
func (s *Store) DeadLetter(ctx context.Context, rec stores.Record, reason string) error {
	if s.closed.Load() {
		return errClosed
	}
	if rec.Seq == 0 {
		out, err := s.db.GetItem(ctx, &dynamodb.GetItemInput{
			TableName:                aws.String(s.table),
			Key:                      recordKey(rec.Session, rec.Route, rec.Envelope.ID),
			ProjectionExpression:     aws.String("#seq"),
			ExpressionAttributeNames: map[string]string{"#seq": aSeq},
			ConsistentRead:           aws.Bool(true),
		})
		if err != nil {
			return fmt.Errorf("dynamodb: dead-letter: %w", err)
		}
		if out.Item == nil {
			return fmt.Errorf("dynamodb: dead-letter: %w", staleErr(&rec))
		}
		rec.Seq = getN(out.Item, aSeq)
	}
	deadAt := rec.DeadAt
	if deadAt.IsZero() {
		deadAt = time.Now()
	}
	names, vals := ownedNames(), ownedValues(&rec)
	names["#route"], names["#seq"] = aRoute, aSeq
	vals[":dead"], vals[":at"], vals[":why"] = vS(string(stores.Dead)), vT(deadAt), vS(reason)
	vals[":all"], vals[":dsk"], vals[":seq"] = vS("dead"), vS(deadSK(deadAt, rec.Seq)), vN(rec.Seq)
	items := []types.TransactWriteItem{
		{Update: &types.Update{
			TableName: aws.String(s.table),
			Key:       recordKey(rec.Session, rec.Route, rec.Envelope.ID),
			UpdateExpression: aws.String("SET #state = :dead, dead_at = :at, dead_reason = :why, dead_all = :all, " +
				"dead_rpk = #route, dead_sk = :dsk REMOVE ready_pk, timer_pk, timer_at, live_pk, key_pk, co_pk"),
			ConditionExpression:       aws.String(ownedCond + " AND #seq = :seq"),
			ExpressionAttributeNames:  names,
			ExpressionAttributeValues: vals,
		}},
		counterItem(s.table, rec.Session, rec.Route, -1, 1, nil),
	}
	err := s.transact(ctx, items)
	if rs, ok := cancelReasons(err); ok && len(rs) > 0 && reasonCode(rs[0]) == codeCondition {
		return fmt.Errorf("dynamodb: dead-letter: %w", staleErr(&rec))
	}
	if err != nil {
		return fmt.Errorf("dynamodb: dead-letter: %w", err)
	}
	return nil
}
