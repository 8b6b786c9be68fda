package dynamodb

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/gobridge/gobridge/stores"
)

// oldestWindow is how many records at the head of each partition Stats
// reads for the oldest CreatedAt.
const oldestWindow = 100

// Stats implements stores.Store without scanning: one Query of the stats
// items (counts updated in the same transactions as the records), and per
// partition of a session with live records one Query of the first
// oldestWindow records for Oldest. Records enter a partition in about the
// order they were created, so the oldest is among them unless a record
// created long before was appended behind more than oldestWindow newer
// ones.
func (s *Store) Stats(ctx context.Context) ([]stores.SessionStats, error) {
	if err := s.usable(ctx); err != nil {
		return nil, err
	}
	all, err := s.counters(ctx)
	if err != nil {
		return nil, fmt.Errorf("dynamodb: stats: %w", err)
	}
	var out []stores.SessionStats
	for session, c := range all {
		st := stores.SessionStats{Session: session, Routes: map[string]stores.RouteCounts{}}
		for route, n := range c.routes {
			if n[0] != 0 || n[2] != 0 {
				st.Routes[route] = stores.RouteCounts{Live: int(n[0]), Dead: int(n[2])}
				st.Live, st.Bytes = st.Live+int(n[0]), st.Bytes+n[1]
			}
		}
		for p := range c.parts {
			if st.Live == 0 {
				break
			}
			if err := s.oldest(ctx, &st, p); err != nil {
				return nil, fmt.Errorf("dynamodb: stats of session %q: %w", session, err)
			}
		}
		if len(st.Routes) > 0 {
			out = append(out, st)
		}
	}
	slices.SortFunc(out, func(a, b stores.SessionStats) int { return cmp.Compare(a.Session, b.Session) })
	return out, nil
}

// counts are one session's stats, summed over its shards.
type counts struct {
	routes map[string]*[3]int64 // live, bytes, dead
	parts  map[int]bool
}

// counters reads every session's stats items.
func (s *Store) counters(ctx context.Context) (map[string]*counts, error) {
	all := map[string]*counts{}
	err := s.query(ctx, &dynamodb.QueryInput{KeyConditionExpression: aws.String("#pk = :pk")}, []any{":pk", statsPK},
		func(it item) bool {
			c := all[getS(it, "name")]
			if c == nil {
				c = &counts{routes: map[string]*[3]int64{}, parts: map[int]bool{}}
				all[getS(it, "name")] = c
			}
			if ns, ok := it["parts"].(*types.AttributeValueMemberNS); ok {
				for _, p := range ns.Value {
					n, _ := strconv.Atoi(p)
					c.parts[n] = true
				}
			}
			for name := range it {
				for j, prefix := range []string{"l#", "b#", "d#"} {
					if route, ok := strings.CutPrefix(name, prefix); ok {
						if c.routes[route] == nil {
							c.routes[route] = &[3]int64{}
						}
						c.routes[route][j] += getN(it, name)
					}
				}
			}
			return true
		})
	return all, err
}

// oldest lowers st.Oldest to the CreatedAt of the first records of
// partition p.
func (s *Store) oldest(ctx context.Context, st *stores.SessionStats, p int) error {
	seen := 0
	return s.query(ctx, &dynamodb.QueryInput{
		KeyConditionExpression: aws.String("#pk = :pk AND #sk < :meta"),
		ProjectionExpression:   aws.String("#created_at"),
		Limit:                  aws.Int32(oldestWindow),
	}, []any{":pk", partPK(st.Session, p), ":meta", metaSK}, func(it item) bool {
		if c := getT(it, "created_at"); st.Oldest.IsZero() || c.Before(st.Oldest) {
			st.Oldest = c
		}
		seen++
		return seen < oldestWindow
	})
}
