package dynamodb

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/gobridge/gobridge/stores"
)

// maxLeaseName bounds lease names: List finds them by prefix in a sort key.
const maxLeaseName = 1000

// leaseCond is the condition under which a claim, or an append claimed,
// may use token :lt: the lease of its partition is held under that token.
const leaseCond = "#lt = :lt AND #lo <> :none"

func leaseNames() map[string]string { return map[string]string{"#lt": aToken, "#lo": aOwner} }

// leaseCheck is a ConditionCheck that the lease name is held under token.
func (s *Store) leaseCheck(name string, token int64) types.TransactWriteItem {
	return types.TransactWriteItem{ConditionCheck: &types.ConditionCheck{
		TableName: s.table, Key: key(leasePK(name), leaseSK), ConditionExpression: aws.String(leaseCond),
		ExpressionAttributeNames:  leaseNames(),
		ExpressionAttributeValues: map[string]types.AttributeValue{":lt": vN(token), ":none": vS("")},
	}}
}

func isConditionFailed(err error) bool {
	var cfe *types.ConditionalCheckFailedException
	return errors.As(err, &cfe)
}

// Acquire implements stores.Leases: the next token from the token item
// (one UpdateItem ADD), then one conditional UpdateItem of the lease item
// (free, released, lapsed at now, or already owner's). A process's first
// Acquire of a name also records the name for List (one PutItem).
func (s *Store) Acquire(ctx context.Context, name, owner string, ttl time.Duration, now time.Time) (stores.Lease, error) {
	if name == "" || owner == "" || ttl <= 0 || len(name) > maxLeaseName {
		return stores.Lease{}, fmt.Errorf("dynamodb: acquire lease: %w: name %q, owner %q, ttl %v", stores.ErrInvalid, name, owner, ttl)
	}
	if err := s.check(ctx); err != nil {
		return stores.Lease{}, err
	}
	if err := s.remember(ctx, "lease "+name, func() error {
		_, err := s.db.PutItem(ctx, &dynamodb.PutItemInput{TableName: s.table, Item: key(leaseReg, name)})
		return err
	}); err != nil {
		return stores.Lease{}, fmt.Errorf("dynamodb: acquire lease %q: %w", name, err)
	}
	var out *dynamodb.UpdateItemOutput
	err := retry(ctx, func() (err error) {
		out, err = s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName: s.table, Key: key("meta", "token"),
			UpdateExpression:          aws.String("ADD #n :one"),
			ExpressionAttributeNames:  map[string]string{"#n": aCounter},
			ExpressionAttributeValues: map[string]types.AttributeValue{":one": vN(1)},
			ReturnValues:              types.ReturnValueUpdatedNew,
		})
		return err
	})
	if err != nil {
		return stores.Lease{}, fmt.Errorf("dynamodb: acquire lease %q: next token: %w", name, err)
	}
	le := stores.Lease{Name: name, Owner: owner, Token: getN(out.Attributes, aCounter), Until: time.Unix(0, now.Add(ttl).UnixNano()).UTC()}
	err = s.updateLease(ctx, le, "SET #name = :name, #lo = :o, #lt = :lt, #u = :u",
		"attribute_not_exists(#lt) OR (#lt < :lt AND (#lo = :o OR #lo = :none OR #u <= :now))",
		map[string]types.AttributeValue{":name": vS(name), ":o": vS(owner), ":lt": vN(le.Token), ":u": vT(le.Until), ":none": vS(""), ":now": vT(now)})
	if isConditionFailed(err) {
		return stores.Lease{}, fmt.Errorf("dynamodb: acquire lease %q: %w", name, stores.ErrLeaseHeld)
	}
	if err != nil {
		return stores.Lease{}, fmt.Errorf("dynamodb: acquire lease %q: %w", name, err)
	}
	return le, nil
}

// Renew implements stores.Leases with one conditional UpdateItem.
func (s *Store) Renew(ctx context.Context, le stores.Lease, ttl time.Duration, now time.Time) (stores.Lease, error) {
	if ttl <= 0 {
		return stores.Lease{}, fmt.Errorf("dynamodb: renew lease: %w: ttl %v", stores.ErrInvalid, ttl)
	}
	if err := s.check(ctx); err != nil {
		return stores.Lease{}, err
	}
	le.Until = time.Unix(0, now.Add(ttl).UnixNano()).UTC()
	err := s.updateLease(ctx, le, "SET #u = :u", "#lo = :o AND #lt = :lt",
		map[string]types.AttributeValue{":o": vS(le.Owner), ":lt": vN(le.Token), ":u": vT(le.Until)})
	if isConditionFailed(err) {
		return stores.Lease{}, fmt.Errorf("dynamodb: renew lease %q: %w", le.Name, stores.ErrLeaseLost)
	}
	if err != nil {
		return stores.Lease{}, fmt.Errorf("dynamodb: renew lease %q: %w", le.Name, err)
	}
	return le, nil
}

// Release implements stores.Leases with one conditional UpdateItem: the
// owner is cleared, the token stays (claims under it fail from then on).
func (s *Store) Release(ctx context.Context, le stores.Lease) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	err := s.updateLease(ctx, le, "SET #lo = :none, #u = :zero", "#lo = :o AND #lt = :lt",
		map[string]types.AttributeValue{":o": vS(le.Owner), ":lt": vN(le.Token), ":none": vS(""), ":zero": vN(0)})
	if isConditionFailed(err) {
		return fmt.Errorf("dynamodb: release lease %q: %w", le.Name, stores.ErrLeaseLost)
	}
	if err != nil {
		return fmt.Errorf("dynamodb: release lease %q: %w", le.Name, err)
	}
	return nil
}

func (s *Store) updateLease(ctx context.Context, le stores.Lease, update, cond string, vals map[string]types.AttributeValue) error {
	names := leaseNames()
	names["#u"], names["#name"] = aUntil, aName
	if !strings.Contains(update+cond, "#name") {
		delete(names, "#name")
	}
	return retry(ctx, func() error {
		_, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName: s.table, Key: key(leasePK(le.Name), leaseSK),
			UpdateExpression: aws.String(update), ConditionExpression: aws.String(cond),
			ExpressionAttributeNames: names, ExpressionAttributeValues: vals,
		})
		return err
	})
}

// List implements stores.Leases: one Query of the lease names by prefix,
// then strongly consistent reads of their lease items. Leases come sorted
// by name.
func (s *Store) List(ctx context.Context, prefix string, now time.Time) ([]stores.Lease, error) {
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	var keys []map[string]types.AttributeValue
	err := s.query(ctx, &dynamodb.QueryInput{
		KeyConditionExpression:    aws.String("#pk = :pk AND begins_with(#sk, :p)"),
		ExpressionAttributeNames:  map[string]string{"#pk": aPK, "#sk": aSK},
		ExpressionAttributeValues: map[string]types.AttributeValue{":pk": vS(leaseReg), ":p": vS(prefix)},
		ConsistentRead:            aws.Bool(true),
	}, func(it map[string]types.AttributeValue) bool {
		keys = append(keys, key(leasePK(getS(it, aSK)), leaseSK))
		return true
	})
	if err != nil {
		return nil, fmt.Errorf("dynamodb: list leases: %w", err)
	}
	items, err := s.getItems(ctx, keys)
	if err != nil {
		return nil, fmt.Errorf("dynamodb: list leases: %w", err)
	}
	var out []stores.Lease
	for _, it := range items {
		le := stores.Lease{Name: getS(it, aName), Owner: getS(it, aOwner), Token: getN(it, aToken), Until: getT(it, aUntil)}
		if le.Owner != "" && le.Until.After(now) {
			out = append(out, le)
		}
	}
	slices.SortFunc(out, func(a, b stores.Lease) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// remember runs write once per process for id (a registry or lease-name
// item: idempotent writes that only need to happen once).
func (s *Store) remember(ctx context.Context, id string, write func() error) error {
	s.mu.Lock()
	done := s.known[id]
	s.mu.Unlock()
	if done {
		return nil
	}
	if err := retry(ctx, write); err != nil {
		return err
	}
	s.mu.Lock()
	s.known[id] = true
	s.mu.Unlock()
	return nil
}
