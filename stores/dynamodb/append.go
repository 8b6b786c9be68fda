package dynamodb

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/gobridge/gobridge/stores"
)

// maxTxItems is DynamoDB's limit of items per TransactWriteItems.
const maxTxItems = 100

// maxTxBytes keeps a transaction under DynamoDB's 4 MB request limit.
const maxTxBytes = 3 << 20

// appendOp is one record of an Append with the coalesce replacement it
// carries (a pending holder it turns into a tombstone), if any.
type appendOp struct {
	rec    stores.Record
	item   map[string]types.AttributeValue
	size   int
	holder *holder
}

// holder is a pending (unclaimed) record that owns a coalesce key.
type holder struct {
	key      map[string]types.AttributeValue
	part     int
	session  string
	received int64
	next     int64     // its next attempt, unix ns: a replacement is not due earlier
	op       *appendOp // set when the holder is earlier in the same batch
	// extra are other pending records of the key (left by appends that
	// raced with no holder to condition on): a replacement settles them too.
	extra []*holder
}

// Append implements stores.Outbox. It costs one counter update plus one
// TransactWriteItems per chunk of up to 100 items (records, coalesce
// replacements and one live counter per session partition), plus one Query
// per distinct coalesce key. A call is atomic when it fits one chunk (up to
// 99 records of one session partition, about 3 MB); a larger call is split
// into chunks, each atomic, committed in order: on error, earlier chunks
// stay committed (re-appending the whole call is safe: it is idempotent).
func (s *Store) Append(ctx context.Context, recs ...stores.Record) error {
	if s.closed.Load() {
		return errClosed
	}
	ops, err := s.planAppend(ctx, recs)
	if err != nil {
		return fmt.Errorf("dynamodb: append: %w", err)
	}
	if len(ops) == 0 {
		return nil
	}
	first, err := s.nextSeq(ctx, int64(len(ops)))
	if err != nil {
		return fmt.Errorf("dynamodb: append: %w", err)
	}
	for i, op := range ops {
		op.rec.Seq = first + int64(i)
		op.item[aSeq] = vN(op.rec.Seq)
	}
	for len(ops) > 0 {
		n := s.chunkLen(ops)
		if err := s.appendChunk(ctx, ops[:n]); err != nil {
			return fmt.Errorf("dynamodb: append: %w", err)
		}
		ops = ops[n:]
	}
	return nil
}

// planOps validates recs, drops in-batch duplicates, stamps CreatedAt (and
// what stamp sets) and encodes each record's item, within the item limit.
func planOps(recs []stores.Record, validate func(*stores.Record) error, stamp func(*stores.Record, time.Time),
	encode func(*stores.Record) map[string]types.AttributeValue) ([]*appendOp, error) {
	now := time.Now()
	seen := make(map[stores.Key]bool, len(recs))
	ops := make([]*appendOp, 0, len(recs))
	for i := range recs {
		r := recs[i]
		if err := validate(&r); err != nil {
			return nil, err
		}
		if seen[r.Key()] {
			continue
		}
		seen[r.Key()] = true
		if r.CreatedAt.IsZero() {
			r.CreatedAt = now
		}
		stamp(&r, now)
		op := &appendOp{rec: r, item: encode(&r)}
		op.size = itemSize(op.item)
		if op.size > maxItemBytes {
			return nil, fmt.Errorf("%w: record %s is %d bytes, over DynamoDB's item limit", stores.ErrInvalid, r.Envelope.ID, op.size)
		}
		ops = append(ops, op)
	}
	return ops, nil
}

// planAppend validates recs, drops in-batch duplicates, stamps CreatedAt
// and resolves coalesce keys against the pending holders in the table.
func (s *Store) planAppend(ctx context.Context, recs []stores.Record) ([]*appendOp, error) {
	ops, err := planOps(recs, (*stores.Record).Validate, func(r *stores.Record, _ time.Time) {
		r.State = stores.Pending
		r.Attempts, r.Token, r.ClaimUntil = 0, 0, time.Time{}
		r.DeadAt, r.DeadReason = time.Time{}, ""
	}, func(r *stores.Record) map[string]types.AttributeValue { return newItem(r, time.Time{}) })
	if err != nil {
		return nil, err
	}
	holders := make(map[string]*holder)
	for _, op := range ops {
		r := &op.rec
		if r.CoalesceKey == "" {
			continue
		}
		ck := coPK(r.Session, r.Route, r.CoalesceKey)
		h, ok := holders[ck]
		if !ok {
			var err error
			if h, err = s.coalesceHolder(ctx, ck); err != nil {
				return nil, err
			}
		}
		recv := nanos(r.Envelope.ReceivedAt)
		if h != nil && recv < h.received {
			// An older message never replaces a newer one: keep it as a
			// tombstone so that re-appending it stays a no-op.
			s.toTombstone(op)
			holders[ck] = h
			continue
		}
		if h != nil {
			if h.next > nanos(r.NextAttemptAt) {
				// The replacement inherits the replaced record's backoff:
				// a new message must not make a backed-off key due at once.
				r.NextAttemptAt = fromNanos(h.next)
				op.item = newItem(r, time.Time{})
				op.size = itemSize(op.item)
			}
			if h.op != nil {
				op.holder = h.op.holder // the table's holder h.op was replacing
				s.toTombstone(h.op)
			} else {
				op.holder = h
			}
		}
		holders[ck] = &holder{key: op.item, part: r.Partition, session: r.Session, received: recv,
			next: nanos(r.NextAttemptAt), op: op}
	}
	return ops, nil
}

// toTombstone turns a planned record into a done tombstone.
func (s *Store) toTombstone(op *appendOp) {
	op.rec.State = stores.Done
	op.item = newItem(&op.rec, time.Now().Add(s.opts.DoneRetention))
	op.size = itemSize(op.item)
	op.holder = nil
}

// coalesceHolder returns the pending record holding the coalesce key ck (the
// newest, should the index hold several), with its next attempt read
// consistently; nil when there is none or the index copy is stale.
func (s *Store) coalesceHolder(ctx context.Context, ck string) (*holder, error) {
	// The index is eventually consistent and a concurrent append may settle
	// the record it names: read the newest few, and again when all of them
	// are stale, so that the key's pending record is found, not missed.
	for range 4 {
		out, err := s.db.Query(ctx, &dynamodb.QueryInput{
			TableName:                 aws.String(s.table),
			IndexName:                 aws.String(idxCoalesce),
			KeyConditionExpression:    aws.String("#k = :k"),
			ExpressionAttributeNames:  map[string]string{"#k": aCoPK},
			ExpressionAttributeValues: map[string]types.AttributeValue{":k": vS(ck)},
			ScanIndexForward:          aws.Bool(false),
			Limit:                     aws.Int32(4),
		})
		if err != nil {
			return nil, fmt.Errorf("query coalesce holder: %w", err)
		}
		if len(out.Items) == 0 {
			return nil, nil
		}
		var found *holder
		for _, it := range out.Items {
			sess, _, _ := splitSK(getS(it, aSK))
			h := &holder{
				key:      map[string]types.AttributeValue{aPK: it[aPK], aSK: it[aSK]},
				part:     int(getN(it, aPart)),
				session:  sess,
				received: getN(it, aReceived),
			}
			cur, err := s.db.GetItem(ctx, &dynamodb.GetItemInput{
				TableName:                aws.String(s.table),
				Key:                      h.key,
				ProjectionExpression:     aws.String("#state, #next, #co"),
				ExpressionAttributeNames: map[string]string{"#state": aState, "#next": aNext, "#co": aCoPK},
				ConsistentRead:           aws.Bool(true),
			})
			if err != nil {
				return nil, fmt.Errorf("read coalesce holder: %w", err)
			}
			if getS(cur.Item, aState) != string(stores.Pending) || getS(cur.Item, aCoPK) != ck {
				continue // claimed or settled since the index copy
			}
			h.next = getN(cur.Item, aNext)
			if found == nil {
				found = h
			} else {
				found.extra = append(found.extra, h)
				found.next = max(found.next, h.next)
			}
		}
		if found != nil {
			return found, nil
		}
	}
	return nil, nil
}

// chunkLen returns how many leading ops fit one transaction, leaving room
// for one live counter per (session, route) and, while a session is not yet
// registered by this Store, the session registry item.
func (s *Store) chunkLen(ops []*appendOp) int {
	keys := make(map[counterKey]bool)
	items, bytes, registry := 0, 0, 0
	for i, op := range ops {
		reg := registry
		if _, ok := s.registered.Load(op.rec.Session); !ok {
			reg = 1
		}
		add := 1
		if op.holder != nil {
			add += 1 + len(op.holder.extra)
		}
		k := counterKey{op.rec.Session, op.rec.Route}
		newKeys := 0
		if !keys[k] {
			newKeys = 1
		}
		if i > 0 && (items+add+newKeys+len(keys)+reg > maxTxItems || bytes+op.size > maxTxBytes) {
			return i
		}
		items += add
		bytes += op.size
		keys[k] = true
		registry = reg
	}
	return len(ops)
}

// appendChunk commits ops in one transaction. Records that already exist
// are dropped from it (idempotent append), coalesce replacements whose
// holder changed meanwhile look their holder up again, and the rest is
// retried.
func (s *Store) appendChunk(ctx context.Context, ops []*appendOp) error {
	ops = slices.Clone(ops)
	for range len(ops) + 2 {
		items, owner := s.appendItems(ops)
		if len(items) == 0 {
			return nil
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
		for i, r := range rs {
			if reasonCode(r) != codeCondition || owner[i].op == nil {
				continue
			}
			if owner[i].isHolder {
				if err := s.reresolve(ctx, owner[i].op); err != nil {
					return err
				}
			} else {
				drop[owner[i].op] = true
			}
		}
		if len(drop) == 0 && !anyHolderDropped(rs, owner) {
			return err
		}
		ops = slices.DeleteFunc(ops, func(op *appendOp) bool { return drop[op] })
	}
	return fmt.Errorf("append chunk: gave up after repeated conflicts")
}

// reresolve finds op's coalesce holder again after the one it planned to
// replace changed (a concurrent append replaced it, or it was claimed), so
// that concurrent appends of one key still leave one pending record.
func (s *Store) reresolve(ctx context.Context, op *appendOp) error {
	op.holder = nil
	r := &op.rec
	h, err := s.coalesceHolder(ctx, coPK(r.Session, r.Route, r.CoalesceKey))
	if err != nil || h == nil || getS(h.key, aPK) == recordPK(r.Envelope.ID) {
		return err
	}
	if nanos(r.Envelope.ReceivedAt) < h.received {
		s.toTombstone(op)
		return nil
	}
	if h.next > nanos(r.NextAttemptAt) {
		r.NextAttemptAt = fromNanos(h.next)
		op.item = newItem(r, time.Time{})
		op.size = itemSize(op.item)
	}
	op.holder = h
	return nil
}

func anyHolderDropped(rs []types.CancellationReason, owner []itemOwner) bool {
	for i, r := range rs {
		if reasonCode(r) == codeCondition && owner[i].isHolder {
			return true
		}
	}
	return false
}

// itemOwner says which op a transaction item came from.
type itemOwner struct {
	op       *appendOp // nil for a counter
	isHolder bool
}

func (s *Store) appendItems(ops []*appendOp) ([]types.TransactWriteItem, []itemOwner) {
	var items []types.TransactWriteItem
	var owner []itemOwner
	delta := make(counters)
	gc := time.Now().Add(s.opts.DoneRetention).Unix()
	for _, op := range ops {
		items = append(items, types.TransactWriteItem{Put: &types.Put{
			TableName:           aws.String(s.table),
			Item:                op.item,
			ConditionExpression: aws.String("attribute_not_exists(pk)"),
		}})
		owner = append(owner, itemOwner{op: op})
		if op.rec.State == stores.Pending {
			delta.addLive(op.rec.Session, op.rec.Route, op.rec.Partition, 1)
		}
		if h := op.holder; h != nil {
			items = append(items, types.TransactWriteItem{Update: &types.Update{
				TableName:           aws.String(s.table),
				Key:                 h.key,
				UpdateExpression:    aws.String(doneUpdate),
				ConditionExpression: aws.String("#state = :pending AND attribute_exists(#co)"),
				ExpressionAttributeNames: map[string]string{
					"#state": aState, "#co": aCoPK, "#gc": aGC,
				},
				ExpressionAttributeValues: map[string]types.AttributeValue{
					":pending": vS(string(stores.Pending)), ":done": vS(string(stores.Done)), ":gc": vN(gc),
				},
			}})
			owner = append(owner, itemOwner{op: op, isHolder: true})
			delta.addLive(h.session, op.rec.Route, h.part, -1)
			for _, x := range h.extra {
				items = append(items, types.TransactWriteItem{Update: &types.Update{
					TableName:                aws.String(s.table),
					Key:                      x.key,
					UpdateExpression:         aws.String(doneUpdate),
					ConditionExpression:      aws.String("#state = :pending AND attribute_exists(#co)"),
					ExpressionAttributeNames: map[string]string{"#state": aState, "#co": aCoPK, "#gc": aGC},
					ExpressionAttributeValues: map[string]types.AttributeValue{
						":pending": vS(string(stores.Pending)), ":done": vS(string(stores.Done)), ":gc": vN(gc),
					},
				}})
				owner = append(owner, itemOwner{op: op, isHolder: true})
				delta.addLive(x.session, op.rec.Route, x.part, -1)
			}
		}
	}
	for _, it := range delta.items(s.table, time.Now()) {
		items = append(items, it)
		owner = append(owner, itemOwner{})
	}
	if it, ok := s.registerItem(ops); ok {
		items = append(items, it)
		owner = append(owner, itemOwner{})
	}
	return items, owner
}

// doneUpdate turns a record into a key-only tombstone that TTL removes.
// It needs #state, #gc, :done and :gc.
const doneUpdate = "SET #state = :done, #gc = :gc REMOVE payload, headers, topic, ready_pk, timer_pk, timer_at, " +
	"live_pk, key_pk, co_pk, dead_all, dead_rpk, dead_sk"

// nextSeq reserves n sequence numbers and returns the first.
func (s *Store) nextSeq(ctx context.Context, n int64) (int64, error) {
	out, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 aws.String(s.table),
		Key:                       map[string]types.AttributeValue{aPK: vS(seqPK), aSK: vS(seqSK)},
		UpdateExpression:          aws.String("ADD #v :n"),
		ExpressionAttributeNames:  map[string]string{"#v": aValue},
		ExpressionAttributeValues: map[string]types.AttributeValue{":n": vN(n)},
		ReturnValues:              types.ReturnValueUpdatedNew,
	})
	if err != nil {
		return 0, fmt.Errorf("reserve seq: %w", err)
	}
	return getN(out.Attributes, aValue) - n + 1, nil
}

// registerItem returns the registry update for the sessions of ops that
// this Store has not yet seen committed, if any.
func (s *Store) registerItem(ops []*appendOp) (types.TransactWriteItem, bool) {
	var sessions []string
	for _, op := range ops {
		if _, ok := s.registered.Load(op.rec.Session); !ok && !slices.Contains(sessions, op.rec.Session) {
			sessions = append(sessions, op.rec.Session)
		}
	}
	if len(sessions) == 0 {
		return types.TransactWriteItem{}, false
	}
	slices.Sort(sessions)
	return registryItem(s.table, sessions), true
}
