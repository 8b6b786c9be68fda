package dynamodb

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/gobridge/gobridge/stores"
)

// Lease items live in one partition (pk "lease", sk the lease name) with
// owner, token and until (unix ns); tokens come from one counter item
// (pk "meta#token"), so they grow across names, owners and restarts. A
// released lease keeps its item with an empty owner.
const (
	leasePK             = "lease"
	tokenPK, tokenSK    = "meta#token", "meta"
	aOwner, aLeaseUntil = "owner", "until"
	aLeaseToken         = "token"
)

// Leases is a stores.Leases on a DynamoDB table. It is safe for concurrent
// use by many goroutines and processes.
type Leases struct {
	db     *dynamodb.Client
	table  string
	closed atomic.Bool
}

// OpenLeases returns the lease store on opts.LeaseTable (else opts.Table,
// else DefaultLeaseTable), creating the table when opts.CreateTables is set.
func OpenLeases(ctx context.Context, opts Options) (*Leases, error) {
	table := opts.LeaseTable
	if table == "" {
		table = opts.Table
	}
	if table == "" {
		table = DefaultLeaseTable
	}
	db := opts.Client
	if db == nil {
		var err error
		if db, err = NewClient(ctx, opts); err != nil {
			return nil, err
		}
	}
	if opts.CreateTables {
		if err := CreateLeaseTable(ctx, db, table); err != nil {
			return nil, err
		}
	}
	return &Leases{db: db, table: table}, nil
}

// Close implements stores.Leases: later calls fail. It is idempotent.
func (l *Leases) Close() error {
	l.closed.Store(true)
	return nil
}

func leaseKey(name string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{aPK: vS(leasePK), aSK: vS(name)}
}

// Acquire implements stores.Leases with two requests: the token counter
// and a conditional update that holds when the lease is free, lapsed at
// now, or already the owner's.
func (l *Leases) Acquire(ctx context.Context, name, owner string, ttl time.Duration, now time.Time) (stores.Lease, error) {
	if l.closed.Load() {
		return stores.Lease{}, errClosed
	}
	if name == "" || owner == "" || ttl <= 0 {
		return stores.Lease{}, fmt.Errorf("dynamodb: acquire lease: %w: name %q, owner %q, ttl %v", stores.ErrInvalid, name, owner, ttl)
	}
	out, err := l.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 aws.String(l.table),
		Key:                       map[string]types.AttributeValue{aPK: vS(tokenPK), aSK: vS(tokenSK)},
		UpdateExpression:          aws.String("ADD #v :one"),
		ExpressionAttributeNames:  map[string]string{"#v": aValue},
		ExpressionAttributeValues: map[string]types.AttributeValue{":one": vN(1)},
		ReturnValues:              types.ReturnValueUpdatedNew,
	})
	if err != nil {
		return stores.Lease{}, fmt.Errorf("dynamodb: acquire lease %q: next token: %w", name, err)
	}
	le := stores.Lease{Name: name, Owner: owner, Token: getN(out.Attributes, aValue), Until: fromNanos(nanos(now.Add(ttl)))}
	_, err = l.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:        aws.String(l.table),
		Key:              leaseKey(name),
		UpdateExpression: aws.String("SET #o = :o, #t = :t, #u = :u"),
		ConditionExpression: aws.String("(attribute_not_exists(#t) OR #t < :t) AND " +
			"(attribute_not_exists(#o) OR #o = :o OR #o = :none OR #u <= :now)"),
		ExpressionAttributeNames: map[string]string{"#o": aOwner, "#t": aLeaseToken, "#u": aLeaseUntil},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":o": vS(owner), ":t": vN(le.Token), ":u": vT(le.Until), ":none": vS(""), ":now": vN(nanos(now)),
		},
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	if isConditionFailed(err) {
		return stores.Lease{}, fmt.Errorf("dynamodb: acquire lease %q: %w", name, stores.ErrLeaseHeld)
	}
	if err != nil {
		return stores.Lease{}, fmt.Errorf("dynamodb: acquire lease %q: %w", name, err)
	}
	return le, nil
}

// Renew implements stores.Leases with one conditional update on the
// owner and token.
func (l *Leases) Renew(ctx context.Context, le stores.Lease, ttl time.Duration, now time.Time) (stores.Lease, error) {
	if l.closed.Load() {
		return stores.Lease{}, errClosed
	}
	if ttl <= 0 {
		return stores.Lease{}, fmt.Errorf("dynamodb: renew lease: %w: ttl %v", stores.ErrInvalid, ttl)
	}
	le.Until = fromNanos(nanos(now.Add(ttl)))
	_, err := l.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                aws.String(l.table),
		Key:                      leaseKey(le.Name),
		UpdateExpression:         aws.String("SET #u = :u"),
		ConditionExpression:      aws.String("#o = :o AND #t = :t"),
		ExpressionAttributeNames: map[string]string{"#o": aOwner, "#t": aLeaseToken, "#u": aLeaseUntil},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":o": vS(le.Owner), ":t": vN(le.Token), ":u": vT(le.Until),
		},
	})
	if isConditionFailed(err) {
		return stores.Lease{}, fmt.Errorf("dynamodb: renew lease %q: %w", le.Name, stores.ErrLeaseLost)
	}
	if err != nil {
		return stores.Lease{}, fmt.Errorf("dynamodb: renew lease %q: %w", le.Name, err)
	}
	return le, nil
}

// Release implements stores.Leases: the owner is cleared (the token stays,
// so later tokens stay larger).
func (l *Leases) Release(ctx context.Context, le stores.Lease) error {
	if l.closed.Load() {
		return errClosed
	}
	_, err := l.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                aws.String(l.table),
		Key:                      leaseKey(le.Name),
		UpdateExpression:         aws.String("SET #o = :none, #u = :zero"),
		ConditionExpression:      aws.String("#o = :o AND #t = :t"),
		ExpressionAttributeNames: map[string]string{"#o": aOwner, "#t": aLeaseToken, "#u": aLeaseUntil},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":o": vS(le.Owner), ":t": vN(le.Token), ":none": vS(""), ":zero": vN(0),
		},
	})
	if isConditionFailed(err) {
		return fmt.Errorf("dynamodb: release lease %q: %w", le.Name, stores.ErrLeaseLost)
	}
	if err != nil {
		return fmt.Errorf("dynamodb: release lease %q: %w", le.Name, err)
	}
	return nil
}

// List implements stores.Leases with one strongly consistent Query of the
// lease partition (begins_with on the name), dropping lapsed and released
// leases. Leases come sorted by name.
func (l *Leases) List(ctx context.Context, prefix string, now time.Time) ([]stores.Lease, error) {
	if l.closed.Load() {
		return nil, errClosed
	}
	cond := "#pk = :pk"
	vals := map[string]types.AttributeValue{":pk": vS(leasePK)}
	if prefix != "" {
		cond += " AND begins_with(#sk, :prefix)"
		vals[":prefix"] = vS(prefix)
	}
	in := &dynamodb.QueryInput{
		TableName:                 aws.String(l.table),
		KeyConditionExpression:    aws.String(cond),
		ExpressionAttributeNames:  map[string]string{"#pk": aPK, "#sk": aSK},
		ExpressionAttributeValues: vals,
		ConsistentRead:            aws.Bool(true),
	}
	var out []stores.Lease
	for {
		page, err := l.db.Query(ctx, in)
		if err != nil {
			return nil, fmt.Errorf("dynamodb: list leases: %w", err)
		}
		for _, it := range page.Items {
			le := stores.Lease{
				Name: getS(it, aSK), Owner: getS(it, aOwner),
				Token: getN(it, aLeaseToken), Until: getT(it, aLeaseUntil),
			}
			if le.Owner != "" && le.Until.After(now) {
				out = append(out, le)
			}
		}
		if page.LastEvaluatedKey == nil {
			return out, nil
		}
		in.ExclusiveStartKey = page.LastEvaluatedKey
	}
}
