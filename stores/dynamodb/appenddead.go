package dynamodb

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/gobridge/gobridge/stores"
)

// AppendDead implements stores.DeadLetters. It costs one counter update (the
// Seq reservation) plus one TransactWriteItems per chunk, with the same
// limits as Append: a call is atomic when it fits one chunk (up to 99
// records of one session and route, about 3 MB); a larger call is split
// into chunks, each atomic, committed in order, and re-running it is safe.
// Each record is put only where its key is absent, with the dead-letter
// index keys and none of the live ones; the dead count of its (session,
// route) counter grows by the records put and the session is registered,
// so Inspect counts it.
func (s *Store) AppendDead(ctx context.Context, recs ...stores.Record) error {
	if s.closed.Load() {
		return errClosed
	}
	ops, err := s.planDead(recs)
	if err != nil {
		return fmt.Errorf("dynamodb: append dead letters: %w", err)
	}
	if len(ops) == 0 {
		return nil
	}
	first, err := s.nextSeq(ctx, int64(len(ops)))
	if err != nil {
		return fmt.Errorf("dynamodb: append dead letters: %w", err)
	}
	for i, op := range ops {
		op.rec.Seq = first + int64(i)
		op.item = deadItem(&op.rec)
	}
	for len(ops) > 0 {
		n := s.chunkLen(ops)
		if err := s.appendDeadChunk(ctx, ops[:n]); err != nil {
			return fmt.Errorf("dynamodb: append dead letters: %w", err)
		}
		ops = ops[n:]
	}
	return nil
}

// planDead validates recs, drops in-batch duplicates and stamps the
// defaults. Items are built again once Seq is known.
func (s *Store) planDead(recs []stores.Record) ([]*appendOp, error) {
	return planOps(recs, (*stores.Record).ValidateDead, func(r *stores.Record, now time.Time) {
		if r.DeadAt.IsZero() {
			r.DeadAt = now
		}
		r.State = stores.Dead
		r.Token, r.ClaimUntil = 0, time.Time{}
	}, deadItem)
}

// deadItem encodes a new dead letter: a record item without the live index
// keys (ready, timer, live, okey, coalesce), with the dead ones.
func deadItem(r *stores.Record) map[string]types.AttributeValue {
	it := newItem(r, time.Time{})
	for _, a := range []string{aReadyPK, aTimerPK, aTimerAt, aLivePK, aKeyPK, aCoPK} {
		delete(it, a)
	}
	it[aDeadAt] = vT(r.DeadAt)
	it[aDeadWhy] = vS(r.DeadReason)
	it[aDeadAll] = vS("dead")
	it[aDeadRoute] = vS(r.Route)
	it[aDeadSK] = vS(deadSK(r.DeadAt, r.Seq))
	return it
}

// appendDeadChunk commits ops in one transaction: the conditional puts, one
// dead counter per (session, route) and the registry update. Records whose
// key exists are dropped from it and the rest is retried.
func (s *Store) appendDeadChunk(ctx context.Context, ops []*appendOp) error {
	ops = slices.Clone(ops)
	for range len(ops) + 1 {
		if len(ops) == 0 {
			return nil
		}
		items := make([]types.TransactWriteItem, 0, len(ops)+2)
		delta := make(counters)
		for _, op := range ops {
			items = append(items, types.TransactWriteItem{Put: &types.Put{
				TableName:           aws.String(s.table),
				Item:                op.item,
				ConditionExpression: aws.String("attribute_not_exists(pk)"),
			}})
			delta.get(op.rec.Session, op.rec.Route).dead++
		}
		items = append(items, delta.items(s.table, time.Now())...)
		if it, ok := s.registerItem(ops); ok {
			items = append(items, it)
		}
		err := s.transact(ctx, items)
		if err == nil {
			for _, op := range ops {
				s.registered.Store(op.rec.Session, true)
			}
			return nil
		}
		rs, ok := cancelReasons(err)
		if !ok || len(rs) != len(items) {
			return err
		}
		drop := make(map[*appendOp]bool)
		for i, op := range ops {
			if reasonCode(rs[i]) == codeCondition {
				drop[op] = true
			}
		}
		if len(drop) == 0 {
			return err
		}
		ops = slices.DeleteFunc(ops, func(op *appendOp) bool { return drop[op] })
	}
	return fmt.Errorf("append dead chunk: gave up after repeated conflicts")
}
