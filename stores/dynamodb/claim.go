package dynamodb

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/gobridge/gobridge/stores"
)

// maxReadyPages bounds how many pages of the ready index one Claim reads
// when ordering keys hold back the records it found.
const maxReadyPages = 4

// candidate is a record read from the ready or timer index.
type candidate struct {
	rec  stores.Record
	item map[string]types.AttributeValue
}

// Claim implements stores.Outbox.
//
// It reads the partition's ready index (pending records due at append, in
// Seq order) and the due part of its timer index (released records and
// claims whose time has come), both up to req.Limit items. A record is
// handed out only when every older live record of its ordering key is
// handed out with it: when ready records carry ordering keys, Claim reads
// the not-due part of the timer index (claims not lapsed, releases waiting)
// once, which names every key held back; only when more than 1,000 records
// wait does it fall back to one okey-index query per distinct key. Keys
// found held back are skipped with filtered read-ahead pages (up to
// maxReadyPages). The chosen records are claimed with one conditional
// TransactWriteItems per 100 records; a record whose index copy was stale
// (claimed, settled or changed meanwhile) is skipped with the later records
// of its key.
//
// Cost: 2 or 3 queries + 1 transaction per 100 records, independent of the
// backlog. Records released with a backoff are found by the timer index, so
// when more than req.Limit released records are due at once a Claim may
// take fresh records before a released one of lower Seq; records of one
// ordering key still go out in Seq order.
func (s *Store) Claim(ctx context.Context, req stores.ClaimRequest) ([]stores.Record, error) {
	if s.closed.Load() {
		return nil, errClosed
	}
	if err := req.Validate(); err != nil {
		return nil, fmt.Errorf("dynamodb: %w", err)
	}
	chosen, err := s.choose(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("dynamodb: claim: %w", err)
	}
	out, err := s.claimChosen(ctx, req, chosen)
	if err != nil {
		return nil, fmt.Errorf("dynamodb: claim: %w", err)
	}
	return out, nil
}

// choose picks up to req.Limit claimable records in Seq order, respecting
// ordering keys.
func (s *Store) choose(ctx context.Context, req stores.ClaimRequest) ([]*candidate, error) {
	pp := partPK(req.Session, req.Partition)
	now := nanos(req.Now)
	byID := make(map[string]*candidate)
	add := func(items []map[string]types.AttributeValue) {
		for _, it := range items {
			id := itemID(it)
			if _, ok := byID[id]; !ok {
				byID[id] = &candidate{rec: decode(it), item: it}
			}
		}
	}
	timer, timerNext, err := s.queryPage(ctx, &dynamodb.QueryInput{
		TableName:                 aws.String(s.table),
		IndexName:                 aws.String(idxTimer),
		KeyConditionExpression:    aws.String("#p = :p AND #t <= :now"),
		ExpressionAttributeNames:  map[string]string{"#p": aTimerPK, "#t": aTimerAt},
		ExpressionAttributeValues: map[string]types.AttributeValue{":p": vS(pp), ":now": vN(now)},
	}, req.Limit)
	if err != nil {
		return nil, fmt.Errorf("query timer index: %w", err)
	}
	add(timer)
	view := &keyView{timerComplete: timerNext == nil}
	keys := make(keyLists)
	var start map[string]types.AttributeValue
	var blocked []string
	for page := 0; ; page++ {
		in := &dynamodb.QueryInput{
			TableName:                 aws.String(s.table),
			IndexName:                 aws.String(idxReady),
			KeyConditionExpression:    aws.String("#p = :p"),
			ExpressionAttributeNames:  map[string]string{"#p": aReadyPK},
			ExpressionAttributeValues: map[string]types.AttributeValue{":p": vS(pp)},
			ExclusiveStartKey:         start,
		}
		var ready []map[string]types.AttributeValue
		if page == 0 || len(blocked) == 0 {
			ready, start, err = s.queryPage(ctx, in, req.Limit)
		} else {
			// Later pages skip the keys found held back, reading up to
			// readAhead items in one request.
			skipKeys(in, blocked)
			in.Limit = aws.Int32(readAhead)
			var out *dynamodb.QueryOutput
			if out, err = s.db.Query(ctx, in); err == nil {
				ready, start = out.Items, out.LastEvaluatedKey
			}
		}
		if err != nil {
			return nil, fmt.Errorf("query ready index: %w", err)
		}
		add(ready)
		view.readyBound = 1<<63 - 1
		if start != nil {
			view.readyBound = getN(start, aSeq)
		}
		if view.timerComplete && view.held == nil && !s.perKeyOnly && hasKeys(ready) {
			if err := s.loadHeld(ctx, pp, now, view); err != nil {
				return nil, err
			}
		}
		cands := slices.SortedFunc(maps.Values(byID), func(a, b *candidate) int { return int64Cmp(a.rec.Seq, b.rec.Seq) })
		var chosen []*candidate
		for {
			var missing []string
			chosen, missing, blocked = pick(cands, keys, view, now, req.Limit)
			if len(missing) == 0 {
				break
			}
			if err := s.loadKeys(ctx, req.Session, cands, missing, keys); err != nil {
				return nil, err
			}
		}
		if len(chosen) >= req.Limit || start == nil || page+1 == maxReadyPages {
			return chosen, nil
		}
	}
}

func claimable(r *stores.Record, now int64) bool {
	switch r.State {
	case stores.Pending:
		return nanos(r.NextAttemptAt) <= now
	case stores.Claimed:
		return nanos(r.ClaimUntil) <= now
	}
	return false
}

// queryPage runs a query until it has n items or the index is exhausted,
// and returns the key to continue from (nil when exhausted).
func (s *Store) queryPage(ctx context.Context, in *dynamodb.QueryInput, n int) ([]map[string]types.AttributeValue, map[string]types.AttributeValue, error) {
	var items []map[string]types.AttributeValue
	for {
		in.Limit = aws.Int32(int32(min(n-len(items), 1000)))
		out, err := s.db.Query(ctx, in)
		if err != nil {
			return nil, nil, err
		}
		items = append(items, out.Items...)
		if out.LastEvaluatedKey == nil || len(items) >= n {
			return items, out.LastEvaluatedKey, nil
		}
		in.ExclusiveStartKey = out.LastEvaluatedKey
	}
}

// claimChosen stamps the chosen records in transactions of up to 100 items.
// Records whose index copy was stale are skipped, with the later records of
// their ordering key.
func (s *Store) claimChosen(ctx context.Context, req stores.ClaimRequest, chosen []*candidate) ([]stores.Record, error) {
	var out []stores.Record
	skipKey := make(map[string]bool)
	for len(chosen) > 0 {
		n := min(len(chosen), maxTxItems)
		chunk := slices.DeleteFunc(slices.Clone(chosen[:n]), func(c *candidate) bool {
			return c.rec.Envelope.Key != "" && skipKey[c.rec.Envelope.Key]
		})
		chosen = chosen[n:]
		for len(chunk) > 0 {
			items := make([]types.TransactWriteItem, len(chunk))
			for i, c := range chunk {
				items[i] = s.claimItem(req, c)
			}
			err := s.transact(ctx, items)
			if err == nil {
				for _, c := range chunk {
					out = append(out, claimedRecord(req, c))
				}
				break
			}
			rs, ok := cancelReasons(err)
			if !ok || len(rs) != len(chunk) {
				return nil, err
			}
			failed := make(map[*candidate]bool)
			for i, r := range rs {
				if code := reasonCode(r); code != "" && code != codeNone {
					failed[chunk[i]] = true
					if k := chunk[i].rec.Envelope.Key; k != "" {
						skipKey[k] = true
					}
				}
			}
			if len(failed) == 0 {
				return nil, err
			}
			chunk = slices.DeleteFunc(chunk, func(c *candidate) bool {
				return failed[c] || (c.rec.Envelope.Key != "" && skipKey[c.rec.Envelope.Key] && !failed[c])
			})
		}
	}
	slices.SortFunc(out, func(a, b stores.Record) int { return int64Cmp(a.Seq, b.Seq) })
	return out, nil
}

// claimItem is the conditional update that claims c: it holds only if the
// record is still in the state (and attempt) its index copy shows.
func (s *Store) claimItem(req stores.ClaimRequest, c *candidate) types.TransactWriteItem {
	r := &c.rec
	cond := "#state = :was AND attempts = :a AND next_at <= :now"
	if r.State == stores.Claimed {
		cond = "#state = :was AND attempts = :a AND claim_until <= :now"
	}
	first := r.FirstAttemptAt
	if first.IsZero() {
		first = req.Now
	}
	return types.TransactWriteItem{Update: &types.Update{
		TableName: aws.String(s.table),
		Key:       map[string]types.AttributeValue{aPK: c.item[aPK], aSK: c.item[aSK]},
		UpdateExpression: aws.String("SET #state = :claimed, #token = :t, claim_until = :u, attempts = :a1, " +
			"first_at = :first, timer_pk = part_pk, timer_at = :u REMOVE ready_pk, co_pk"),
		ConditionExpression:      aws.String(cond),
		ExpressionAttributeNames: map[string]string{"#state": aState, "#token": aToken},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":was": vS(string(r.State)), ":claimed": vS(string(stores.Claimed)),
			":t": vN(req.Token), ":u": vT(req.Until), ":a": vN(int64(r.Attempts)),
			":a1": vN(int64(r.Attempts + 1)), ":first": vT(first), ":now": vN(nanos(req.Now)),
		},
	}}
}

func claimedRecord(req stores.ClaimRequest, c *candidate) stores.Record {
	r := c.rec
	r.State = stores.Claimed
	r.Token = req.Token
	r.ClaimUntil = fromNanos(nanos(req.Until))
	r.Attempts++
	if r.FirstAttemptAt.IsZero() {
		r.FirstAttemptAt = fromNanos(nanos(req.Now))
	}
	return r
}

func int64Cmp(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
