package dynamodb

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
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

// Stats implements stores.Store without scanning: the stats items, and
// for Oldest the first oldestWindow records of each partition of a session
// with live records. Records enter a partition in about the order they
// were created, so the oldest is among them unless one created long before
// was appended behind more than oldestWindow newer ones.
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
			n, _ := strconv.Atoi(p)
			if err := s.oldest(ctx, &st, n); err != nil {
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

// statNames prefix the route attributes of a stats item: live records,
// their bytes, dead letters.
var statNames = [3]string{"l#", "b#", "d#"}

// counts are one session's stats: by route, live records, their bytes and
// dead letters, and the partitions used. A transaction collects its
// changes in them; Stats sums the session's shards in them.
type counts struct {
	routes map[string][3]int64
	parts  map[string]bool
}

// sessionCounts returns the counts of session in all, adding them when
// missing.
func sessionCounts(all map[string]*counts, session string) *counts {
	c := all[session]
	if c == nil {
		c = &counts{routes: map[string][3]int64{}, parts: map[string]bool{}}
		all[session] = c
	}
	return c
}

// add adds n to count j (see statNames) of route.
func (c *counts) add(route string, j int, n int64) {
	v := c.routes[route]
	v[j] += n
	c.routes[route] = v
}

// addStats adds, per session, one update of a random stats shard: the
// session's name, the partitions appended to, and the counts by route.
func (t *txn) addStats() {
	shard := strconv.Itoa(rand.N(statsShards))
	for session, d := range t.stats {
		var terms []string
		kv := []any{":name", session}
		if len(d.parts) > 0 {
			terms = append(terms, "#parts :parts")
			kv = append(kv, ":parts", &types.AttributeValueMemberNS{Value: slices.Collect(maps.Keys(d.parts))})
		}
		for route, c := range d.routes {
			for j, prefix := range statNames {
				if c[j] != 0 {
					n := strconv.Itoa(len(terms))
					terms = append(terms, "#c"+n+" :c"+n)
					kv = append(kv, "#c"+n, prefix+route, ":c"+n, c[j])
				}
			}
		}
		if len(terms) > 0 {
			t.add(nil, t.s.tw(key(statsPK, bound(session)+"#"+shard), "SET #name = :name ADD "+strings.Join(terms, ", "), "", kv...))
		}
	}
}

// counters reads every session's stats items.
func (s *Store) counters(ctx context.Context) (map[string]*counts, error) {
	all := map[string]*counts{}
	err := s.query(ctx, &dynamodb.QueryInput{KeyConditionExpression: aws.String("#pk = :pk")}, []any{":pk", statsPK},
		func(it item) bool {
			c := sessionCounts(all, getS(it, "name"))
			if ns, ok := it["parts"].(*types.AttributeValueMemberNS); ok {
				for _, p := range ns.Value {
					c.parts[p] = true
				}
			}
			for name := range it {
				for j, prefix := range statNames {
					if route, ok := strings.CutPrefix(name, prefix); ok {
						c.add(route, j, getN(it, name))
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
		st.Partitions = max(st.Partitions, p+1)
		seen++
		return seen < oldestWindow
	})
}
