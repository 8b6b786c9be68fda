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

// releaseItem is the conditional update that returns the claimed rec to
// pending, due at next; a record with a coalesce key goes back into the
// coalesce index, so that a newer append replaces it.
func releaseItem(table string, rec *stores.Record, next time.Time, lastError string) *types.Update {
	names, vals := ownedNames(), ownedValues(rec)
	vals[":pending"], vals[":next"], vals[":err"] = vS(string(stores.Pending)), vT(next), vS(lastError)
	expr := "SET #state = :pending, next_at = :next, last_error = :err, timer_at = :next"
	if rec.CoalesceKey != "" {
		expr += ", #co = :co"
		names["#co"] = aCoPK
		vals[":co"] = vS(coPK(rec.Session, rec.Route, rec.CoalesceKey))
	}
	return &types.Update{
		TableName:                 aws.String(table),
		Key:                       recordKey(rec.Session, rec.Route, rec.Envelope.ID),
		UpdateExpression:          aws.String(expr),
		ConditionExpression:       aws.String(ownedCond),
		ExpressionAttributeNames:  names,
		ExpressionAttributeValues: vals,
	}
}

func releaseUpdate(table string, rec *stores.Record, next time.Time, lastError string) *dynamodb.UpdateItemInput {
	u := releaseItem(table, rec, next, lastError)
	return &dynamodb.UpdateItemInput{
		TableName: u.TableName, Key: u.Key, UpdateExpression: u.UpdateExpression,
		ConditionExpression: u.ConditionExpression, ExpressionAttributeNames: u.ExpressionAttributeNames,
		ExpressionAttributeValues: u.ExpressionAttributeValues,
	}
}

// releaseCoalesced releases rec (claimed, with a coalesce key) against the
// pending record of its key appended while it was claimed, if any, in one
// transaction: when that one is at least as new it supersedes rec (rec
// becomes a done tombstone, not counted as delivered, and the other one is
// due no earlier than next); when it is older it is absorbed and rec is
// released due at the later next attempt of the two. It reports false when
// there is no such record, or it changed meanwhile: the caller then
// releases rec alone.
func (s *Store) releaseCoalesced(ctx context.Context, rec *stores.Record, next time.Time, lastError string) (bool, error) {
	// A concurrent append may replace the other record between the read
	// and the transaction: read it again, a few times.
	for range 5 {
		done, retry, err := s.releaseCoalescedOnce(ctx, rec, next, lastError)
		if !retry {
			return done, err
		}
	}
	return false, nil
}

// releaseCoalescedOnce is one attempt of releaseCoalesced; retry reports
// that the other record changed before the transaction.
func (s *Store) releaseCoalescedOnce(ctx context.Context, rec *stores.Record, next time.Time, lastError string) (done, retry bool, err error) {
	ck := coPK(rec.Session, rec.Route, rec.CoalesceKey)
	h, err := s.coalesceHolder(ctx, ck)
	if err != nil {
		return false, false, fmt.Errorf("dynamodb: release: %w", err)
	}
	if h == nil || getS(h.key, aPK) == recordPK(rec.Envelope.ID) {
		return false, false, nil
	}
	now := time.Now()
	gc := now.Add(s.opts.DoneRetention).Unix()
	pendingNames := map[string]string{"#state": aState, "#co": aCoPK, "#next": aNext}
	pendingVals := map[string]types.AttributeValue{":pending": vS(string(stores.Pending)), ":co": vS(ck)}
	const pendingCond = "#state = :pending AND #co = :co"
	var items []types.TransactWriteItem
	if h.received >= nanos(rec.Envelope.ReceivedAt) {
		names, vals := ownedNames(), ownedValues(rec)
		names["#gc"] = aGC
		vals[":done"], vals[":gc"] = vS(string(stores.Done)), vN(gc)
		items = append(items, types.TransactWriteItem{Update: &types.Update{
			TableName:                 aws.String(s.table),
			Key:                       recordKey(rec.Session, rec.Route, rec.Envelope.ID),
			UpdateExpression:          aws.String(doneUpdate),
			ConditionExpression:       aws.String(ownedCond),
			ExpressionAttributeNames:  names,
			ExpressionAttributeValues: vals,
		}})
		if nanos(next) > h.next {
			pendingVals[":next"], pendingVals[":hnext"] = vT(next), vN(h.next)
			items = append(items, types.TransactWriteItem{Update: &types.Update{
				TableName:                 aws.String(s.table),
				Key:                       h.key,
				UpdateExpression:          aws.String("SET #next = :next, timer_pk = part_pk, timer_at = :next REMOVE ready_pk"),
				ConditionExpression:       aws.String(pendingCond + " AND #next = :hnext"),
				ExpressionAttributeNames:  pendingNames,
				ExpressionAttributeValues: pendingVals,
			}})
		} else {
			// A no-op update rather than a ConditionCheck, which would need
			// one more IAM action.
			delete(pendingNames, "#next")
			items = append(items, types.TransactWriteItem{Update: &types.Update{
				TableName:                 aws.String(s.table),
				Key:                       h.key,
				UpdateExpression:          aws.String("SET #co = :co"),
				ConditionExpression:       aws.String(pendingCond),
				ExpressionAttributeNames:  pendingNames,
				ExpressionAttributeValues: pendingVals,
			}})
		}
		items = append(items, counterItem(s.table, rec.Session, rec.Route, -1, 0, nil))
	} else {
		if h.next > nanos(next) {
			next = fromNanos(h.next)
		}
		items = append(items, types.TransactWriteItem{Update: releaseItem(s.table, rec, next, lastError)})
		pendingNames["#gc"] = aGC
		delete(pendingNames, "#next")
		pendingVals[":done"], pendingVals[":gc"] = vS(string(stores.Done)), vN(gc)
		items = append(items, types.TransactWriteItem{Update: &types.Update{
			TableName:                 aws.String(s.table),
			Key:                       h.key,
			UpdateExpression:          aws.String(doneUpdate),
			ConditionExpression:       aws.String(pendingCond),
			ExpressionAttributeNames:  pendingNames,
			ExpressionAttributeValues: pendingVals,
		}})
		items = append(items, counterItem(s.table, h.session, rec.Route, -1, 0, nil))
	}
	err = s.transact(ctx, items)
	if err == nil {
		return true, false, nil
	}
	if rs, ok := cancelReasons(err); ok && len(rs) == len(items) {
		switch {
		case reasonCode(rs[0]) == codeCondition:
			return false, false, fmt.Errorf("dynamodb: release: %w", staleErr(rec))
		case reasonCode(rs[1]) == codeCondition:
			return false, true, nil
		}
	}
	return false, false, fmt.Errorf("dynamodb: release: %w", err)
}
