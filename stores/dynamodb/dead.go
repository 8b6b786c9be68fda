package dynamodb

import (
	"cmp"
	"context"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/gobridge/gobridge/stores"
)

// Dead implements stores.Store. A route's dead letters are one item
// collection sorted as listed; without a route, the routes with dead
// letters come from the stats items and their pages are merged. Without
// payloads, the collection is read lean; a query by ID reads its few
// letters whole.
func (s *Store) Dead(ctx context.Context, q stores.DeadQuery) ([]stores.Record, string, error) {
	start := deadPrefix(0, 0) // before every letter
	if q.After != "" && q.ID == "" {
		var err error
		if start, err = deadStart(q.After); err != nil {
			return nil, "", err
		}
	}
	limit := q.PageSize()
	if err := s.usable(ctx); err != nil {
		return nil, "", err
	}
	var all []stores.Record
	var err error
	if q.ID != "" {
		all, err = s.deadByID(ctx, q.ID)
	} else {
		routes := []string{q.Route}
		if q.Route == "" {
			routes, err = s.deadRoutes(ctx)
		}
		for i := 0; err == nil && i < len(routes); i++ {
			n, cond := 0, "#pk = :pk AND #sk > :start"
			in := &dynamodb.QueryInput{KeyConditionExpression: &cond, Limit: aws.Int32(int32(min(limit+1, 1000)))}
			if q.NoPayload {
				in.ProjectionExpression = aws.String(lean)
			}
			err = s.query(ctx, in, []any{":pk", deadPK(routes[i]), ":start", start}, func(it item) bool {
				all, n = append(all, decode(it, stores.Dead)), n+1
				return n <= limit
			})
		}
	}
	if err != nil {
		return nil, "", fmt.Errorf("dynamodb: dead letters: %w", err)
	}
	slices.SortFunc(all, func(a, b stores.Record) int { // as the sort keys: DeadAt, Seq, deadTie
		if c := cmp.Or(cmp.Compare(nanos(a.DeadAt), nanos(b.DeadAt)), cmp.Compare(a.Seq, b.Seq)); c != 0 {
			return c
		}
		return strings.Compare(deadTie(&a), deadTie(&b))
	})
	page, next, err := q.Page(all)
	if next != "" {
		next += "." + deadTie(&page[len(page)-1])
	}
	return page, next, err
}

// deadStart returns the sort key of the letter at cursor c, after which
// the page starts: a stores.DeadCursor followed by the letter's deadTie
// (letters of different sessions may share DeadAt and Seq).
func deadStart(c string) (string, error) {
	i := strings.LastIndexByte(c, '.')
	if _, err := hex.DecodeString(c[i+1:]); i < 0 || err != nil || len(c)-i-1 != 16 {
		return "", fmt.Errorf("%w: bad cursor %q", stores.ErrInvalid, c)
	}
	at, seq, err := stores.ParseDeadCursor(c[:i])
	if err != nil {
		return "", err
	}
	return deadPrefix(at, seq) + c[i:], nil
}

// deadByID returns the dead letters with envelope ID id.
func (s *Store) deadByID(ctx context.Context, id string) ([]stores.Record, error) {
	var locs []item
	err := s.query(ctx, &dynamodb.QueryInput{KeyConditionExpression: aws.String("#pk = :pk")},
		[]any{":pk", keyOf(stores.Key{ID: id})["pk"]}, func(it item) bool {
			if getS(it, "state") == string(stores.Dead) {
				locs = append(locs, loc(it))
			}
			return true
		})
	if err != nil {
		return nil, err
	}
	items, err := s.getItems(ctx, locs)
	var out []stores.Record
	for _, it := range items {
		out = append(out, decode(it, stores.Dead))
	}
	return out, err
}

// deadRoutes returns the routes that have dead letters, by the stats.
func (s *Store) deadRoutes(ctx context.Context) ([]string, error) {
	all, err := s.counters(ctx)
	var routes []string
	for _, c := range all {
		for route, n := range c.routes {
			if n[2] > 0 && !slices.Contains(routes, route) {
				routes = append(routes, route)
			}
		}
	}
	return routes, err
}
