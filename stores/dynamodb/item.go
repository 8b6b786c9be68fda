package dynamodb

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"reflect"
	"regexp"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/gobridge/gobridge/message"
	"github.com/gobridge/gobridge/stores"
)

type item = map[string]types.AttributeValue

const (
	metaSK    = "m" // the partition item, after every Seq sort key
	statsPK   = "stats"
	ptrSK     = "c"
	partBits  = 10
	maxParts  = 1 << partBits
	maxReason = 4 << 10
	// maxItemBytes keeps a record under DynamoDB's 400 KB item limit with
	// room for what dead-lettering adds (a reason of up to maxReason).
	maxItemBytes = 390_000
	// statsShards is how many stats items a session's counts are spread
	// over, so that writers rarely touch the same item.
	statsShards = 16
)

// digest is the hex SHA-256 of parts, each length-prefixed so that no two
// lists of parts share a digest.
func digest(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		fmt.Fprintf(h, "%d:%s", len(p), p)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// bound returns s, or "~" and its digest when s is too long for a key.
func bound(s string) string {
	if len(s) <= 200 {
		return s
	}
	return "~" + digest(s)
}

func partPK(session string, part int) string { return "p#" + bound(session) + "#" + strconv.Itoa(part) }
func seqSK(seq int64) string                 { return fmt.Sprintf("%019d", seq) }
func keySK(session, route string) string     { return digest(session, route) }
func deadPK(route string) string             { return "d#" + bound(route) }
func ptrPK(session, route, ck string) string { return "c#" + digest(session, route, ck) }

// leaseKey is the key of lease name: every lease is in one item collection,
// which List reads by prefix.
func leaseKey(name string) item { return key("leases", name) }

func keyOf(k stores.Key) item { return key("k#"+digest(k.ID), keySK(k.Session, k.Route)) }

// deadSK orders a route's dead letters by DeadAt, then Seq; the digest of
// the key (deadTie) keeps letters of different sessions apart.
func deadSK(r *stores.Record) string {
	return deadPrefix(nanos(r.DeadAt), r.Seq) + "." + deadTie(r)
}

// deadTie orders dead letters of different sessions that share DeadAt and
// Seq (Seqs are unique within a session only).
func deadTie(r *stores.Record) string { return keySK(r.Session, r.Envelope.ID)[:16] }

func deadPrefix(deadAt, seq int64) string { return fmt.Sprintf("%020d.%019d", max(deadAt, 0), seq) }

func key(pk, sk string) item { return item{"pk": av(pk), "sk": av(sk)} }

// loc is the key of the record or dead letter a key item or coalesce
// pointer names.
func loc(it item) item { return key(getS(it, "loc_pk"), getS(it, "loc_sk")) }

func itemID(it item) string { return getS(it, "pk") + "\x00" + getS(it, "sk") }

func nanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

// av is the attribute value of a string, number, time (Unix ns), bool or
// []byte. A string that is not UTF-8 (message data: an ID, key or header
// value from an HTTP ingest header) is binary, which getS reads back: the
// SDK would send each of its invalid bytes as U+FFFD.
func av(v any) types.AttributeValue {
	switch v := v.(type) {
	case string:
		if !utf8.ValidString(v) {
			return &types.AttributeValueMemberB{Value: []byte(v)}
		}
		return &types.AttributeValueMemberS{Value: v}
	case int64:
		return &types.AttributeValueMemberN{Value: strconv.FormatInt(v, 10)}
	case int:
		return av(int64(v))
	case time.Time:
		return av(nanos(v))
	case bool:
		return &types.AttributeValueMemberBOOL{Value: v}
	case []byte:
		return &types.AttributeValueMemberB{Value: v}
	case types.AttributeValue:
		return v
	}
	panic(fmt.Sprintf("dynamodb: no attribute value for %T", v))
}

var placeholder = regexp.MustCompile(`#\w+`)

// expr returns the attribute names and values of expressions: each #x in
// them names the attribute x, and kv holds pairs of a placeholder and its
// value (":x", see av) or attribute name ("#x", for names with other
// characters).
func expr(kv []any, exprs ...string) (map[string]string, item) {
	names, vals := map[string]string{}, item{}
	for _, e := range exprs {
		for _, p := range placeholder.FindAllString(e, -1) {
			names[p] = p[1:]
		}
	}
	for i := 0; i < len(kv); i += 2 {
		if p := kv[i].(string); p[0] == '#' {
			names[p] = kv[i+1].(string)
		} else {
			vals[p] = av(kv[i+1])
		}
	}
	if len(names) == 0 {
		names = nil
	}
	if len(vals) == 0 {
		vals = nil
	}
	return names, vals
}

func getS(it item, k string) string {
	switch v := it[k].(type) {
	case *types.AttributeValueMemberS:
		return v.Value
	case *types.AttributeValueMemberB: // a string that is not UTF-8 (av)
		return string(v.Value)
	}
	return ""
}

func getN(it item, k string) int64 {
	v, _ := it[k].(*types.AttributeValueMemberN)
	if v == nil {
		return 0
	}
	n, _ := strconv.ParseInt(v.Value, 10, 64)
	return n
}

func getT(it item, k string) time.Time {
	if n := getN(it, k); n != 0 {
		return time.Unix(0, n).UTC()
	}
	return time.Time{}
}

func getB(it item, k string) bool {
	v, _ := it[k].(*types.AttributeValueMemberBOOL)
	return v != nil && v.Value
}

// encode returns the item of r at (pk, sk): the whole record, without the
// fields that are zero (but token and attempts, which conditions test, and
// payload_len, which Dead reads instead of the payload).
func encode(r *stores.Record, pk, sk string) item {
	e := &r.Envelope
	it := key(pk, sk)
	for name, v := range map[string]any{
		"session": r.Session, "route": r.Route, "part": r.Partition, "seq": r.Seq, "id": e.ID, "topic": e.Topic,
		"qos": int(e.QoS), "okey": e.Key, "ckey": r.CoalesceKey, "cause": r.CausationID, "raw": r.Raw,
		"truncated": r.Truncated, "payload": e.Payload, "created_at": r.CreatedAt, "received_at": e.ReceivedAt,
		"expires_at": r.ExpiresAt, "first_at": r.FirstAttemptAt, "next_at": r.NextAttemptAt, "dead_at": r.DeadAt,
		"last_error": clip(r.LastError), "dead_reason": clip(r.DeadReason),
	} {
		if rv := reflect.ValueOf(v); rv.IsZero() || rv.Kind() == reflect.Slice && rv.Len() == 0 {
			continue
		}
		it[name] = av(v)
	}
	it["token"], it["attempts"], it["payload_len"] = av(r.Token), av(r.Attempts), av(len(e.Payload))
	if len(e.Headers) > 0 {
		h := make(item, len(e.Headers))
		for k, v := range e.Headers {
			h[k] = av(v)
		}
		it["headers"] = &types.AttributeValueMemberM{Value: h}
	}
	return it
}

// clip bounds an error text kept in an item.
func clip(s string) string { return s[:min(len(s), maxReason)] }

// lean projects the attributes decode reads but the payload.
const lean = "#pk, #sk, #session, #route, #part, #seq, #id, #topic, #qos, #okey, #ckey, #cause, #raw, #truncated, " +
	"#created_at, #received_at, #expires_at, #first_at, #next_at, #dead_at, #last_error, #dead_reason, #token, #attempts, " +
	"#headers, #payload_len"

// decode turns a record or dead-letter item back into a Record.
func decode(it item, state stores.State) stores.Record {
	r := stores.Record{
		Session: getS(it, "session"), Partition: int(getN(it, "part")), Route: getS(it, "route"),
		Envelope: message.Envelope{
			ID: getS(it, "id"), Topic: getS(it, "topic"), QoS: byte(getN(it, "qos")),
			ReceivedAt: getT(it, "received_at"), Key: getS(it, "okey"),
		},
		CoalesceKey: getS(it, "ckey"), CausationID: getS(it, "cause"), Raw: getB(it, "raw"), Truncated: getB(it, "truncated"),
		State: state, Seq: getN(it, "seq"), CreatedAt: getT(it, "created_at"), Token: getN(it, "token"),
		Attempts: int(getN(it, "attempts")), FirstAttemptAt: getT(it, "first_at"), NextAttemptAt: getT(it, "next_at"),
		LastError: getS(it, "last_error"), ExpiresAt: getT(it, "expires_at"),
		DeadAt: getT(it, "dead_at"), DeadReason: getS(it, "dead_reason"),
	}
	if v, ok := it["payload"].(*types.AttributeValueMemberB); ok {
		r.Envelope.Payload = v.Value
	} else {
		r.PayloadLen = int(getN(it, "payload_len")) // projected out (lean)
	}
	if v, ok := it["headers"].(*types.AttributeValueMemberM); ok {
		r.Envelope.Headers = make(map[string]string, len(v.Value))
		for k := range v.Value {
			r.Envelope.Headers[k] = getS(v.Value, k)
		}
	}
	return r
}

// recordSize is an upper bound of the size of r's item as DynamoDB counts
// it: its variable parts, plus room for attribute names, numbers and keys.
func recordSize(r *stores.Record) int {
	n := int(r.Size()) + 4*len(r.Envelope.Headers) + len(r.Envelope.ID) + len(r.Envelope.Key) + len(r.CoalesceKey) +
		len(r.CausationID) + len(clip(r.LastError)) + len(clip(r.DeadReason))
	return n + 1024 + 2*len(r.Session) + len(r.Route)
}
