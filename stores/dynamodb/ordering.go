package dynamodb

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"golang.org/x/sync/errgroup"
)

// This file holds how Claim keeps records of one ordering key in Seq order
// without reading the key's backlog.

// keyView is what a Claim knows about the partition's records that hold
// back an ordering key. When the due part of the timer index was read to
// its end, the not-due part (claimed and waiting records) was read to its
// end too, and a candidate lies within the part of the ready index that was
// read, the only older live records of its key that are not candidates
// are the not-due ones: then held answers for every key at once, and no
// per-key query is needed.
type keyView struct {
	timerComplete bool
	readyBound    int64            // Seq of the last ready item read; max when all were read
	held          map[string]int64 // oldest not-due Seq per ordering key; nil when unknown
}

func (v *keyView) knows(seq int64) bool {
	return v.timerComplete && v.held != nil && seq <= v.readyBound
}

func hasKeys(items []map[string]types.AttributeValue) bool {
	for _, it := range items {
		if getS(it, aOrderKey) != "" {
			return true
		}
	}
	return false
}

// loadHeld reads the not-due part of the partition's timer index (claims
// not lapsed, releases waiting for their next attempt) in one request of
// up to readAhead items. When more are waiting, held stays unknown and
// Claim falls back to one query per ordering key.
func (s *Store) loadHeld(ctx context.Context, pp string, now int64, v *keyView) error {
	out, err := s.db.Query(ctx, &dynamodb.QueryInput{
		TableName:                 aws.String(s.table),
		IndexName:                 aws.String(idxTimer),
		KeyConditionExpression:    aws.String("#p = :p AND #t > :now"),
		ProjectionExpression:      aws.String("#ok, #seq"),
		ExpressionAttributeNames:  map[string]string{"#p": aTimerPK, "#t": aTimerAt, "#ok": aOrderKey, "#seq": aSeq},
		ExpressionAttributeValues: map[string]types.AttributeValue{":p": vS(pp), ":now": vN(now)},
		Limit:                     aws.Int32(readAhead),
	})
	if err != nil {
		return fmt.Errorf("query timer index: %w", err)
	}
	if out.LastEvaluatedKey != nil {
		v.timerComplete = false // too many waiting: ask per key
		return nil
	}
	v.held = make(map[string]int64)
	for _, it := range out.Items {
		k, seq := getS(it, aOrderKey), getN(it, aSeq)
		if m, ok := v.held[k]; k != "" && (!ok || seq < m) {
			v.held[k] = seq
		}
	}
	return nil
}

// readAhead is how many ready-index items a follow-up page evaluates.
const readAhead = 1000

// skipKeys filters out records of the given ordering keys (up to 99).
func skipKeys(in *dynamodb.QueryInput, keys []string) {
	keys = keys[:min(len(keys), 99)]
	ph := make([]string, len(keys))
	for i, k := range keys {
		ph[i] = ":k" + strconv.Itoa(i)
		in.ExpressionAttributeValues[ph[i]] = vS(k)
	}
	in.ExpressionAttributeNames["#ok"] = aOrderKey
	in.FilterExpression = aws.String("attribute_not_exists(#ok) OR NOT (#ok IN (" + strings.Join(ph, ", ") + "))")
}

func itemID(it map[string]types.AttributeValue) string { return getS(it, aPK) + "\x00" + getS(it, aSK) }

// pick walks cands in Seq order like the memory store does: a record is
// taken when claimable and when no older live record of its ordering key is
// left behind (not claimable, or not among the candidates at all). It
// returns the ordering keys whose live records it needs to know first
// (missing) and the keys it found held back.
func pick(cands []*candidate, keys keyLists, view *keyView, now int64, limit int) (out []*candidate, missing, held []string) {
	ok := make(map[string]bool, len(cands)) // claimable candidates by item id
	count := make(map[string]int)           // candidates per ordering key
	for _, c := range cands {
		if claimable(&c.rec, now) {
			ok[itemID(c.item)] = true
		}
		if k := c.rec.Envelope.Key; k != "" {
			count[k]++
		}
	}
	blocked := make(map[string]bool)
	asked := make(map[string]bool)
	for _, c := range cands {
		if len(out)+len(missing) >= limit {
			break
		}
		can := claimable(&c.rec, now)
		if k := c.rec.Envelope.Key; k != "" {
			if blocked[k] || asked[k] {
				continue
			}
			if !can {
				blocked[k] = true
				held = append(held, k)
				continue
			}
			if view.knows(c.rec.Seq) {
				if m, ok := view.held[k]; ok && m < c.rec.Seq {
					blocked[k] = true
					held = append(held, k)
					continue
				}
				out = append(out, c)
				continue
			}
			l := keys[k]
			if l == nil || l.limit < count[k]+1 {
				asked[k] = true
				missing = append(missing, k)
				continue
			}
			if c.rec.Seq > l.blockedFrom(ok) {
				blocked[k] = true
				held = append(held, k)
				continue
			}
		}
		if can {
			out = append(out, c)
		}
	}
	return out, missing, held
}

// keyLists caches, per ordering key, the oldest live records of the key
// (item ids in Seq order) and how many were asked for.
type keyLists map[string]*keyList

type keyList struct {
	limit int
	ids   []string
	seqs  []int64
	full  bool // the query returned limit items: more may exist
}

// blockedFrom returns the Seq of the oldest live record of the key that is
// not a claimable candidate; records of the key after it must wait.
func (l *keyList) blockedFrom(ok map[string]bool) int64 {
	for i, id := range l.ids {
		if !ok[id] {
			return l.seqs[i]
		}
	}
	if l.full {
		// Only reachable when the index lags: be conservative.
		return l.seqs[len(l.seqs)-1]
	}
	return 1<<63 - 1
}

// loadKeys queries the okey index for the oldest live records of each of
// the given ordering keys, as many as there are candidates of the key plus
// one, in parallel.
func (s *Store) loadKeys(ctx context.Context, session string, cands []*candidate, todo []string, kl keyLists) error {
	need := make(map[string]int)
	for _, c := range cands {
		if k := c.rec.Envelope.Key; k != "" {
			need[k]++
		}
	}
	res := make([]*keyList, len(todo))
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	for i, k := range todo {
		g.Go(func() error {
			lim := need[k] + 1
			items, _, err := s.queryPage(ctx, &dynamodb.QueryInput{
				TableName:                 aws.String(s.table),
				IndexName:                 aws.String(idxOrderKey),
				KeyConditionExpression:    aws.String("#k = :k"),
				ExpressionAttributeNames:  map[string]string{"#k": aKeyPK},
				ExpressionAttributeValues: map[string]types.AttributeValue{":k": vS(keyPK(session, k))},
			}, lim)
			if err != nil {
				return fmt.Errorf("query ordering key index: %w", err)
			}
			l := &keyList{limit: lim, full: len(items) >= lim}
			for _, it := range items {
				l.ids = append(l.ids, itemID(it))
				l.seqs = append(l.seqs, getN(it, aSeq))
			}
			res[i] = l
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	for i, k := range todo {
		kl[k] = res[i]
	}
	return nil
}
