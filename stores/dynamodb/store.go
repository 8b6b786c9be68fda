// Package dynamodb is the DynamoDB backend of stores.Store: an outbox, its
// dead letters and its leases in one table (pk, sk; TTL on ttl; no
// secondary index) that several gobridge instances share. The README
// section "DynamoDB" documents the table layout, the cost of each call and
// the limits; docs/DESIGN.md §4 the guarantees. What the code relies on:
//
// Order: a record's Seq is a partition counter n shifted left by partBits,
// or'd with the partition. Every append transaction sets its partition's
// counter to the last n it uses, on the condition that the counter is below
// the first: within a partition Seq order is commit order, so a Claim that
// reads n and then queries up to it sees every record below it, whichever
// instance appended it, and ClaimRequest.After is safe to start from.
//
// Atomicity: a Write is one TransactWriteItems per chunk of up to 100
// items, committed in order. When one fails, the earlier ones stay
// committed, and so may the failed one unless DynamoDB answered that it
// refused it (4xx): its answer may have been lost. Retrying the same Batch
// in the same process is idempotent: an append a failed attempt inserted is
// reported as stored (its Seq and current Token), a settlement it applied
// or may have, whose record is in the state it leaves, as applied.
package dynamodb

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"

	"github.com/gobridge/gobridge/stores"
)

var _ stores.Store = (*Store)(nil)

// doneRetention is how long the key of a delivered or dropped record is
// remembered (a tombstone), so that the same envelope appended again within
// that time is a no-op. DynamoDB's TTL deletes it afterwards.
const doneRetention = 7 * 24 * time.Hour

// Options configures Open.
type Options struct {
	// Table is the table. Required: the configuration (routes) defaults
	// it to gobridge_outbox.
	Table string
	// Region is the AWS region. Empty uses the default chain (AWS_REGION,
	// the shared config file).
	Region string
	// Endpoint overrides the DynamoDB endpoint, for emulators such as
	// DynamoDB Local only (http://127.0.0.1:14568). Empty uses AWS.
	Endpoint string
	// CreateTables creates the table (and enables its TTL) when it does not
	// exist. Meant for tests, emulators and a first deployment.
	CreateTables bool
	// Client, when set, is used instead of one built from Region and
	// Endpoint.
	Client *dynamodb.Client
	// Now is the store's clock (CreatedAt, DeadAt, coalescing, tombstones'
	// expiry). Defaults to time.Now. Seqs follow the real clock.
	Now func() time.Time
}

// Store is a stores.Store on one DynamoDB table, safe for concurrent use by
// many goroutines and many processes. Create it with Open.
type Store struct {
	now    func() time.Time
	db     *dynamodb.Client
	table  *string
	closed atomic.Bool
	skew   atomic.Int64 // DynamoDB's clock minus this process's, ns (see observe)

	wmu  sync.Mutex       // one Write at a time: a process's writes never conflict with each other
	seqs map[string]int64 // under wmu: partition pk → the highest counter this process knows committed
	// partial, under wmu: what the transactions of failed Writes did or
	// may have done (see lost), until a Write retries it: appends by key →
	// their Seq, settlements by key → 0.
	partial map[stores.Key]int64

	cmu        sync.Mutex
	unreturned map[string]untaken // under cmu: by partition lease (see remember)
}

// NewClient builds a DynamoDB client from the default credential chain, with
// opts.Region (empty: the chain's) and opts.Endpoint applied.
func NewClient(ctx context.Context, opts Options) (*dynamodb.Client, error) {
	cfg, err := config.LoadDefaultConfig(ctx, config.WithRegion(opts.Region))
	if err != nil {
		return nil, fmt.Errorf("dynamodb: load aws config: %w", err)
	}
	emulator := opts.Endpoint != "" || os.Getenv("AWS_ENDPOINT_URL_DYNAMODB") != "" || os.Getenv("AWS_ENDPOINT_URL") != ""
	if cfg.Region == "" && !emulator { // an emulator takes any
		return nil, errors.New("dynamodb: no region: set options.region or AWS_REGION")
	}
	return dynamodb.NewFromConfig(cfg, func(o *dynamodb.Options) {
		if opts.Endpoint != "" {
			o.BaseEndpoint = aws.String(opts.Endpoint)
			// DynamoDB Local's x-amz-crc32 does not match what the SDK
			// computes; the check guards transport corruption only.
			o.DisableValidateResponseChecksum = true
		}
	}), nil
}

// Open returns the store on opts.Table, creating the table first when
// opts.CreateTables is set. It checks the table's layout (one
// DescribeTable) and fails with ErrLayout when it does not match.
func Open(ctx context.Context, opts Options) (*Store, error) {
	db := opts.Client
	if db == nil {
		var err error
		if db, err = NewClient(ctx, opts); err != nil {
			return nil, err
		}
	}
	if opts.CreateTables {
		if err := CreateTable(ctx, db, opts.Table); err != nil {
			return nil, err
		}
	}
	if err := checkLayout(ctx, db, opts.Table); err != nil {
		return nil, err
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Store{now: opts.Now, db: db, table: aws.String(opts.Table), seqs: map[string]int64{}, partial: map[stores.Key]int64{},
		unreturned: map[string]untaken{}}, nil
}

// Close marks the store closed; later calls fail. It is idempotent.
func (s *Store) Close() error {
	s.closed.Store(true)
	return nil
}

func (s *Store) usable(ctx context.Context) error {
	if s.closed.Load() {
		return stores.ErrClosed
	}
	return ctx.Err()
}

// codeCondition is the cancellation reason of a transaction item whose
// condition failed.
const codeCondition = "ConditionalCheckFailed"

// maxAttempts bounds the attempts of one transaction that conflicts with
// others or is throttled, and of one Claim or Write chunk re-planned after
// a condition failed.
const maxAttempts = 25

// throttledAttempts bounds the attempts of a transaction whose items are
// throttled, as the SDK bounds those of a throttled call.
const throttledAttempts = 3

// reasons returns the per-item cancellation codes of a cancelled
// transaction (nil for any other error).
func reasons(err error) []types.CancellationReason {
	if tce, ok := errors.AsType[*types.TransactionCanceledException](err); ok {
		return tce.CancellationReasons
	}
	return nil
}

// transient reports a conflict with another transaction, which the same
// request may not meet again, or throttling of a transaction's items
// (for a few attempts: then the caller's backoff paces a throttled
// table). The SDK retries throttled calls itself. A call that may have
// been applied (see lostError) is never retried: its items' conditions
// would fail on what it did.
func transient(err error, attempt int) bool {
	if _, ok := errors.AsType[*lostError](err); ok {
		return false
	}
	if _, ok := errors.AsType[*types.TransactionConflictException](err); ok {
		return true
	}
	rs := reasons(err)
	for _, r := range rs {
		switch aws.ToString(r.Code) {
		case "None", "TransactionConflict":
		case "ThrottlingError", "ProvisionedThroughputExceeded":
			if attempt >= throttledAttempts {
				return false
			}
		default:
			return false
		}
	}
	return len(rs) > 0
}

// mapErr translates DynamoDB's refusal of an item (too large, a key too
// long) into stores.ErrInvalid; other errors pass through.
func mapErr(err error) error {
	if ae, ok := errors.AsType[smithy.APIError](err); ok && ae.ErrorCode() == "ValidationException" {
		return fmt.Errorf("%w: %s", stores.ErrInvalid, ae.ErrorMessage())
	}
	for _, r := range reasons(err) { // a transaction cancelled for an item it cannot hold
		if aws.ToString(r.Code) == "ValidationError" {
			return fmt.Errorf("%w: %s", stores.ErrInvalid, aws.ToString(r.Message))
		}
	}
	return err
}

// backoff waits a jittered delay growing with attempt, or until ctx ends.
func backoff(ctx context.Context, attempt int) error {
	d := time.Duration(2<<min(attempt, 6)) * time.Millisecond
	t := time.NewTimer(d/2 + rand.N(d))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// retry runs f until it succeeds, fails for good, or stays transient
// (conflicts, throttling) for maxAttempts attempts.
func retry(ctx context.Context, f func() error) error {
	for attempt := 0; ; attempt++ {
		err := f()
		if err == nil || !transient(err, attempt) || attempt == maxAttempts {
			return err
		}
		if berr := backoff(ctx, attempt); berr != nil {
			return errors.Join(err, berr) // refused, not lost (see lost)
		}
	}
}

// tw builds a transaction item on the item at k: a Put of k as the whole
// item (upd "put"), a Delete ("delete"), a ConditionCheck (""), or an
// Update with upd, under cond (none when empty), with kv as expr takes
// them. When cond fails, the cancellation returns the item as it was.
func (s *Store) tw(k item, upd, cond string, kv ...any) types.TransactWriteItem {
	var c *string
	if cond != "" {
		c = aws.String(cond)
	}
	n, v := expr(kv, upd, cond)
	old := types.ReturnValuesOnConditionCheckFailureAllOld
	switch upd {
	case "put":
		return types.TransactWriteItem{Put: &types.Put{TableName: s.table, Item: k, ConditionExpression: c,
			ExpressionAttributeNames: n, ExpressionAttributeValues: v, ReturnValuesOnConditionCheckFailure: old}}
	case "delete":
		return types.TransactWriteItem{Delete: &types.Delete{TableName: s.table, Key: k, ConditionExpression: c,
			ExpressionAttributeNames: n, ExpressionAttributeValues: v, ReturnValuesOnConditionCheckFailure: old}}
	case "":
		return types.TransactWriteItem{ConditionCheck: &types.ConditionCheck{TableName: s.table, Key: k,
			ConditionExpression: c, ExpressionAttributeNames: n, ExpressionAttributeValues: v, ReturnValuesOnConditionCheckFailure: old}}
	}
	return types.TransactWriteItem{Update: &types.Update{TableName: s.table, Key: k, UpdateExpression: aws.String(upd),
		ConditionExpression: c, ExpressionAttributeNames: n, ExpressionAttributeValues: v, ReturnValuesOnConditionCheckFailure: old}}
}

// transact runs one TransactWriteItems, retrying it while it only
// conflicts or is throttled.
func (s *Store) transact(ctx context.Context, items []types.TransactWriteItem) error {
	return retry(ctx, func() error {
		maybe := false
		_, err := s.db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: items}, noteApplied(&maybe))
		if err != nil && maybe {
			return &lostError{err}
		}
		return err
	})
}

// updateItem runs one UpdateItem of the item at k (see tw), retrying it
// while it only conflicts or is throttled.
func (s *Store) updateItem(ctx context.Context, k item, upd, cond string, kv ...any) (item, error) {
	u := s.tw(k, upd, cond, kv...).Update
	var out *dynamodb.UpdateItemOutput
	sent := time.Now()
	err := retry(ctx, func() (err error) {
		out, err = s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: s.table, Key: k,
			UpdateExpression: u.UpdateExpression, ConditionExpression: u.ConditionExpression,
			ExpressionAttributeNames: u.ExpressionAttributeNames, ExpressionAttributeValues: u.ExpressionAttributeValues,
			ReturnValues: types.ReturnValueUpdatedNew, ReturnValuesOnConditionCheckFailure: u.ReturnValuesOnConditionCheckFailure})
		return err
	})
	if err != nil {
		return nil, err
	}
	if at, ok := awsmiddleware.GetServerTime(out.ResultMetadata); ok {
		local, _ := awsmiddleware.GetResponseAt(out.ResultMetadata)
		s.observe(at.Sub(local), at.Add(time.Second).Sub(sent))
	}
	return out.Attributes, nil
}

// observe notes how far DynamoDB's clock is ahead of this process's: lease
// items hold times in DynamoDB's clock, so that instances whose clocks
// disagree agree on when a lease ends. An answer's Date (whole seconds)
// and its time in flight put the difference between lo and hi; the clocks
// count as one unless all of it is beyond maxSkew. (A slow answer, not a
// clock, must not move the leases this process writes: they would end
// early by other instances' clocks.)
func (s *Store) observe(lo, hi time.Duration) {
	var d time.Duration
	switch {
	case lo > maxSkew:
		d = lo
	case hi < -maxSkew:
		d = hi
	}
	s.skew.Store(int64(d))
}

const maxSkew = 2 * time.Second

// getItems reads keys with strongly consistent BatchGetItem calls and
// returns the items found by itemID.
func (s *Store) getItems(ctx context.Context, keys []item) (map[string]item, error) {
	out, todo := map[string]item{}, map[string]item{}
	for _, k := range keys {
		todo[itemID(k)] = k // BatchGetItem refuses a key twice
	}
	for keys := range slices.Chunk(slices.Collect(maps.Values(todo)), 100) {
		req := map[string]types.KeysAndAttributes{*s.table: {Keys: keys, ConsistentRead: aws.Bool(true)}}
		// A throttled table leaves keys unprocessed; a response over
		// 16 MB too, but then it makes progress.
		for idle := 0; len(req) > 0; idle++ {
			if idle == maxAttempts {
				return nil, fmt.Errorf("dynamodb: read %d items: keys left unprocessed (throttled)", len(keys))
			}
			if idle > 0 {
				if err := backoff(ctx, idle); err != nil {
					return nil, err
				}
			}
			res, err := s.db.BatchGetItem(ctx, &dynamodb.BatchGetItemInput{RequestItems: req})
			if err != nil {
				return nil, err
			}
			if len(res.Responses[*s.table]) > 0 {
				idle = -1
			}
			for _, it := range res.Responses[*s.table] {
				out[itemID(it)] = it
			}
			req = res.UnprocessedKeys
		}
	}
	return out, nil
}

// query runs the strongly consistent Query in (its expressions' names and
// kv's values filled in as expr does) page by page, calling f for each item
// until f returns false or the pages end.
func (s *Store) query(ctx context.Context, in *dynamodb.QueryInput, kv []any, f func(item) bool) error {
	in.TableName, in.ConsistentRead = s.table, aws.Bool(true)
	in.ExpressionAttributeNames, in.ExpressionAttributeValues = expr(kv, aws.ToString(in.KeyConditionExpression),
		aws.ToString(in.FilterExpression), aws.ToString(in.ProjectionExpression))
	for {
		res, err := s.db.Query(ctx, in)
		if err != nil {
			return err
		}
		for _, it := range res.Items {
			if !f(it) {
				return nil
			}
		}
		if res.LastEvaluatedKey == nil {
			return nil
		}
		in.ExclusiveStartKey = res.LastEvaluatedKey
	}
}
