package dynamodb

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/gobridge/gobridge/stores"
)

// maxLeaseName bounds lease names, which are sort keys.
const maxLeaseName = 1000

// leaseCheck is a ConditionCheck that the lease name is held under token.
func (s *Store) leaseCheck(name string, token int64) types.TransactWriteItem {
	return s.tw(leaseKey(name), "", "#token = :lt AND #owner <> :none", ":lt", token, ":none", "")
}

// server is t, of this process's clock, in DynamoDB's (see observe).
func (s *Store) server(t time.Time) time.Time { return t.Add(time.Duration(s.skew.Load())) }

// Acquire implements stores.Leases: the next token from the token item,
// then a conditional update of the lease item.
func (s *Store) Acquire(ctx context.Context, name, owner string, ttl time.Duration, now time.Time) (stores.Lease, error) {
	if name == "" || owner == "" || ttl <= 0 || len(name) > maxLeaseName {
		return stores.Lease{}, fmt.Errorf("dynamodb: acquire lease: %w: name %q, owner %q, ttl %v", stores.ErrInvalid, name, owner, ttl)
	}
	// Until keeps now's monotonic reading: the holder's checks against it
	// then ignore wall-clock steps (the item holds it in DynamoDB's clock).
	le := stores.Lease{Name: name, Owner: owner, Until: now.Add(ttl)}
	err := s.usable(ctx)
	if err == nil {
		var tok item
		tok, err = s.updateItem(ctx, key("meta", "token"), "ADD #n :one", "", ":one", 1)
		le.Token = getN(tok, "n")
	}
	if err == nil {
		_, err = s.updateItem(ctx, leaseKey(name), "SET #owner = :o, #token = :lt, #until = :u",
			"attribute_not_exists(#token) OR (#token < :lt AND (#owner = :o OR #owner = :none OR #until <= :now))",
			":o", owner, ":lt", le.Token, ":u", s.server(le.Until), ":none", "", ":now", s.server(now))
	}
	switch cfe, held := errors.AsType[*types.ConditionalCheckFailedException](err); {
	case held && getS(cfe.Item, "owner") == owner && getN(cfe.Item, "token") == le.Token:
		err = nil // the SDK's retry of an update whose answer was lost: it applied
	case held:
		err = stores.ErrLeaseHeld
	}
	if err != nil {
		return stores.Lease{}, fmt.Errorf("dynamodb: acquire lease %q: %w", name, err)
	}
	return le, nil
}

// Renew implements stores.Leases.
func (s *Store) Renew(ctx context.Context, le stores.Lease, ttl time.Duration, now time.Time) (stores.Lease, error) {
	if ttl <= 0 {
		return stores.Lease{}, fmt.Errorf("dynamodb: renew lease: %w: ttl %v", stores.ErrInvalid, ttl)
	}
	le.Until = now.Add(ttl)
	if err := s.changeLease(ctx, le, "SET #until = :u", ":u", s.server(le.Until)); err != nil {
		return stores.Lease{}, fmt.Errorf("dynamodb: renew lease %q: %w", le.Name, err)
	}
	return le, nil
}

// Release implements stores.Leases: the owner is cleared, the token stays
// (claims under it fail from then on).
func (s *Store) Release(ctx context.Context, le stores.Lease) error {
	if err := s.changeLease(ctx, le, "SET #owner = :none, #until = :zero", ":none", "", ":zero", 0); err != nil {
		return fmt.Errorf("dynamodb: release lease %q: %w", le.Name, err)
	}
	return nil
}

// changeLease updates the lease item of le while le holds it, else fails
// with ErrLeaseLost.
func (s *Store) changeLease(ctx context.Context, le stores.Lease, upd string, kv ...any) error {
	if err := s.usable(ctx); err != nil {
		return err
	}
	_, err := s.updateItem(ctx, leaseKey(le.Name), upd, "#owner = :o AND #token = :lt",
		append(kv, ":o", le.Owner, ":lt", le.Token)...)
	if _, ok := errors.AsType[*types.ConditionalCheckFailedException](err); ok {
		return stores.ErrLeaseLost
	}
	return err
}

// List implements stores.Leases; leases come sorted by name.
func (s *Store) List(ctx context.Context, prefix string, now time.Time) ([]stores.Lease, error) {
	if err := s.usable(ctx); err != nil {
		return nil, err
	}
	var out []stores.Lease
	err := s.query(ctx, &dynamodb.QueryInput{KeyConditionExpression: aws.String("#pk = :pk AND begins_with(#sk, :p)")},
		[]any{":pk", "leases", ":p", prefix}, func(it item) bool {
			le := stores.Lease{Name: getS(it, "sk"), Owner: getS(it, "owner"), Token: getN(it, "token"),
				Until: getT(it, "until").Add(-time.Duration(s.skew.Load()))}
			if le.Owner != "" && le.Until.After(now) {
				out = append(out, le)
			}
			return true
		})
	if err != nil {
		return nil, fmt.Errorf("dynamodb: list leases: %w", err)
	}
	return out, nil
}
