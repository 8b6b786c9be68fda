package dynamodb

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Counter items live under pk "s#" + session, beside nothing else:
//
//	live#<shard>#<route>          v = live (pending + claimed) records,
//	                              dead = dead letters, parts = partitions used
//	done#<minute>#<shard>#<route> v = completions in that minute (unix/60),
//	                              gc_at = TTL two hours later
//
// and the session registry is one item (meta#sessions, meta) whose
// string set names every session that ever had a record appended. They are
// updated with ADD in the same transactions that change records, so
// Stats and Inspect read them instead of the records.

// counterShards spreads each counter over several items, so that
// concurrent transactions (appends from several instances, the drainers'
// completes) rarely touch the same item and conflict. Readers sum the
// shards.
const counterShards = 8

const (
	liveSKPrefix = "live#"
	doneSKPrefix = "done#"
	// doneKeep is how long a done-per-minute item outlives its minute.
	doneKeep = 2 * time.Hour
)

const registryPK, registrySK = "meta#sessions", "meta"

func counterSK(shard int, route string) string {
	return liveSKPrefix + strconv.Itoa(shard) + "#" + route
}

func doneSK(minute int64, shard int, route string) string {
	return fmt.Sprintf("%s%012d#%d#%s", doneSKPrefix, minute, shard, route)
}

// routeOfCounter returns the route of a live# counter sort key; ok is false
// for the per-session counters of earlier versions ("live#<shard>").
func routeOfCounter(sk string) (route string, ok bool) {
	rest, ok := strings.CutPrefix(sk, liveSKPrefix)
	if !ok {
		return "", false
	}
	_, route, ok = strings.Cut(rest, "#")
	return route, ok
}

// parseDoneSK returns the minute and route of a done# sort key.
func parseDoneSK(sk string) (minute int64, route string, ok bool) {
	rest, ok := strings.CutPrefix(sk, doneSKPrefix)
	if !ok {
		return 0, "", false
	}
	m, rest, ok := strings.Cut(rest, "#")
	if !ok {
		return 0, "", false
	}
	_, route, ok = strings.Cut(rest, "#")
	n, err := strconv.ParseInt(m, 10, 64)
	return n, route, ok && err == nil
}

type counterKey struct{ session, route string }

// counterDelta is the change of one (session, route)'s counters in a
// transaction, with the partitions that received records.
type counterDelta struct {
	live, dead, done int64
	parts            map[int]bool
}

// counters collects counterDelta per (session, route).
type counters map[counterKey]*counterDelta

func (c counters) get(session, route string) *counterDelta {
	k := counterKey{session, route}
	x := c[k]
	if x == nil {
		x = &counterDelta{parts: make(map[int]bool)}
		c[k] = x
	}
	return x
}

// addLive changes the live count; a positive change records the partition.
func (c counters) addLive(session, route string, part int, d int64) {
	x := c.get(session, route)
	x.live += d
	if d > 0 {
		x.parts[part] = true
	}
}

// maxItems is how many transaction items items may return.
func (c counters) maxItems() int { return 2 * len(c) }

// items returns the counter updates, in a stable order: one live# item per
// (session, route) whose live or dead count changes, and one done# item per
// (session, route) with completions, in the minute of now.
func (c counters) items(table string, now time.Time) []types.TransactWriteItem {
	var out []types.TransactWriteItem
	keys := slices.SortedFunc(maps.Keys(c), func(a, b counterKey) int {
		if a.session != b.session {
			return strings.Compare(a.session, b.session)
		}
		return strings.Compare(a.route, b.route)
	})
	for _, k := range keys {
		x := c[k]
		if x.live != 0 || x.dead != 0 || len(x.parts) > 0 {
			out = append(out, counterItem(table, k.session, k.route, x.live, x.dead, slices.Sorted(maps.Keys(x.parts))))
		}
		if x.done > 0 {
			out = append(out, doneItem(table, k.session, k.route, x.done, now))
		}
	}
	return out
}

// counterItem adds live and dead to the counters of (session, route), on a
// random shard, and records the partitions that received records (Stats
// and Inspect look for the oldest record in each).
func counterItem(table, session, route string, live, dead int64, parts []int) types.TransactWriteItem {
	expr := "ADD #v :d, #dead :dead"
	names := map[string]string{"#v": aValue, "#dead": aDeadCount}
	vals := map[string]types.AttributeValue{":d": vN(live), ":dead": vN(dead)}
	if len(parts) > 0 {
		ns := make([]string, len(parts))
		for i, p := range parts {
			ns[i] = strconv.Itoa(p)
		}
		expr += ", #parts :parts"
		names["#parts"] = aParts
		vals[":parts"] = &types.AttributeValueMemberNS{Value: ns}
	}
	return types.TransactWriteItem{Update: &types.Update{
		TableName: aws.String(table),
		Key: map[string]types.AttributeValue{
			aPK: vS(counterPK(session)), aSK: vS(counterSK(rand.N(counterShards), route)),
		},
		UpdateExpression:          aws.String(expr),
		ExpressionAttributeNames:  names,
		ExpressionAttributeValues: vals,
	}}
}

// doneItem adds n completions of (session, route) to the minute of now;
// TTL removes the item doneKeep after that minute.
func doneItem(table, session, route string, n int64, now time.Time) types.TransactWriteItem {
	minute := now.Unix() / 60
	return types.TransactWriteItem{Update: &types.Update{
		TableName: aws.String(table),
		Key: map[string]types.AttributeValue{
			aPK: vS(counterPK(session)), aSK: vS(doneSK(minute, rand.N(counterShards), route)),
		},
		UpdateExpression:         aws.String("ADD #v :n SET #gc = :gc"),
		ExpressionAttributeNames: map[string]string{"#v": aValue, "#gc": aGC},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":n": vN(n), ":gc": vN(minute*60 + int64(doneKeep/time.Second)),
		},
	}}
}

// registryItem adds sessions to the session registry.
func registryItem(table string, sessions []string) types.TransactWriteItem {
	return types.TransactWriteItem{Update: &types.Update{
		TableName:                 aws.String(table),
		Key:                       map[string]types.AttributeValue{aPK: vS(registryPK), aSK: vS(registrySK)},
		UpdateExpression:          aws.String("ADD #s :s"),
		ExpressionAttributeNames:  map[string]string{"#s": aSessions},
		ExpressionAttributeValues: map[string]types.AttributeValue{":s": &types.AttributeValueMemberSS{Value: sessions}},
	}}
}
