package dynamodb

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/gobridge/gobridge/stores"
)

// errReplan: a record changed between the claim's read and its write.
var errReplan = errors.New("dynamodb: claim: a record changed meanwhile")

// Claim implements stores.Store: it reads the partition's counter and
// lease, queries the partition from req.After up to the counter (see Order
// in the package doc), and sets the token of what it found in transactions
// that each check the lease.
func (s *Store) Claim(ctx context.Context, req stores.ClaimRequest) ([]stores.Record, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	if req.Partition >= maxParts {
		return nil, fmt.Errorf("%w: partition %d", stores.ErrInvalid, req.Partition)
	}
	if err := s.usable(ctx); err != nil {
		return nil, err
	}
	for attempt := 0; ; attempt++ {
		out, err := s.claim(ctx, req)
		switch {
		case errors.Is(err, errReplan) && len(out) == 0 && attempt < maxAttempts:
		case errors.Is(err, errReplan):
			return out, nil // a prefix in Seq order was claimed: the rest waits for the next claim
		case err != nil && !errors.Is(err, stores.ErrLeaseLost):
			return out, fmt.Errorf("dynamodb: claim: %w", err)
		default:
			return out, err
		}
	}
}

func (s *Store) claim(ctx context.Context, req stores.ClaimRequest) ([]stores.Record, error) {
	pk, lease := partPK(req.Session, req.Partition), stores.PartitionLease(req.Session, req.Partition)
	items, err := s.getItems(ctx, []item{key(pk, metaSK), leaseKey(lease)})
	if err != nil {
		return nil, err
	}
	le := items[itemID(leaseKey(lease))]
	if le == nil || getN(le, "token") != req.Token || getS(le, "owner") == "" {
		return nil, stores.ErrLeaseLost
	}
	found, err := s.untaken(ctx, lease, req.Token)
	if err != nil {
		return nil, err
	}
	held := min(len(found), req.Limit)
	s.remember(lease, req.Token, found[held:]) // beyond the limit: for the next Claim
	found = found[:held]
	n := getN(items[itemID(key(pk, metaSK))], "n")
	last := n<<partBits | int64(maxParts-1)
	from := max(req.After+1, 1)
	if n != 0 && from <= last && len(found) < req.Limit {
		err = s.query(ctx, &dynamodb.QueryInput{
			KeyConditionExpression: aws.String("#pk = :pk AND #sk BETWEEN :from AND :to"),
			FilterExpression:       aws.String("#token <> :token"),
			Limit:                  aws.Int32(int32(min(max(req.Limit, 100), 1000))),
		}, []any{":pk", pk, ":from", seqSK(from), ":to", seqSK(last), ":token", req.Token}, func(it item) bool {
			found = append(found, it)
			return len(found) < req.Limit
		})
		if err != nil {
			s.remember(lease, req.Token, found[:held])
			return nil, err
		}
	}
	var out []stores.Record
	for _, it := range found[:held] {
		out = append(out, decode(it, stores.Live))
	}
	for i := held; i < len(found); i += 99 {
		chunk := found[i:min(i+99, len(found))]
		if err := s.take(ctx, lease, req.Token, chunk); err != nil {
			switch {
			case errors.Is(err, errReplan): // a prefix in Seq order was claimed
				return out, err
			case errors.Is(err, stores.ErrLeaseLost):
				return nil, err
			case lost(err):
				i += len(chunk)
			}
			// What this Claim took (and the chunk it may have) but does
			// not return: the next Claim under the token returns it.
			s.remember(lease, req.Token, found[:i])
			return nil, err
		}
		for _, it := range chunk {
			r := decode(it, stores.Live)
			r.Token = req.Token
			out = append(out, r)
		}
	}
	return out, nil
}

// untaken is what failed Claims under a lease's token took, or may have,
// without returning it (see remember).
type untaken struct {
	token int64
	keys  []item // in Seq order
}

// remember notes that a Claim under token did not return records, which
// it claimed or may have: the owner ignores a failed Claim's records, and
// its later Claims skip what is claimed under its token, so they would be
// claimed by nobody until the lease changed hands.
func (s *Store) remember(lease string, token int64, records []item) {
	if len(records) == 0 {
		return
	}
	var keys []item
	for _, it := range records {
		keys = append(keys, key(getS(it, "pk"), getS(it, "sk")))
	}
	s.cmu.Lock()
	defer s.cmu.Unlock()
	if u := s.unreturned[lease]; u.token == token {
		keys = append(keys, u.keys...) // the earlier ones were returned first
		slices.SortFunc(keys, func(a, b item) int { return strings.Compare(getS(a, "sk"), getS(b, "sk")) })
	}
	s.unreturned[lease] = untaken{token: token, keys: keys}
}

// untaken reads the records that failed Claims under token remembered,
// and returns those still claimed under it, in Seq order.
func (s *Store) untaken(ctx context.Context, lease string, token int64) ([]item, error) {
	s.cmu.Lock()
	u, ok := s.unreturned[lease]
	delete(s.unreturned, lease)
	s.cmu.Unlock()
	if !ok || u.token != token {
		return nil, nil
	}
	got, err := s.getItems(ctx, u.keys)
	if err != nil {
		s.remember(lease, token, u.keys)
		return nil, err
	}
	var out []item
	for _, k := range u.keys {
		if it := got[itemID(k)]; it != nil && getN(it, "token") == token {
			out = append(out, it)
		}
	}
	return out, nil
}

// take sets the token of records to token in one transaction, provided
// the lease is held under it and none of them changed since it was read.
func (s *Store) take(ctx context.Context, lease string, token int64, records []item) error {
	items := []types.TransactWriteItem{s.leaseCheck(lease, token)}
	for _, it := range records {
		items = append(items, s.tw(key(getS(it, "pk"), getS(it, "sk")), "SET #token = :token",
			"#token = :old AND #attempts = :att", ":token", token, ":old", getN(it, "token"), ":att", getN(it, "attempts")))
	}
	err := s.transact(ctx, items)
	rs := reasons(err)
	switch {
	case len(rs) == 0:
		return err
	case aws.ToString(rs[0].Code) == codeCondition:
		return stores.ErrLeaseLost
	}
	for _, r := range rs[1:] {
		if aws.ToString(r.Code) == codeCondition {
			return errReplan
		}
	}
	return err
}
