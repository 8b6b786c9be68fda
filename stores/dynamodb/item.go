package dynamodb

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/gobridge/gobridge/message"
	"github.com/gobridge/gobridge/stores"
)

// Attribute names. Record and dead-letter items hold a whole Record; the
// other items hold the few attributes the layout (package doc) names.
const (
	aPK, aSK   = "pk", "sk"
	aSession   = "session"
	aRoute     = "route"
	aPart      = "part"
	aSeq       = "seq"
	aID        = "id"
	aTopic     = "topic"
	aPayload   = "payload"
	aHeaders   = "headers"
	aQoS       = "qos"
	aOrderKey  = "okey"
	aCoKey     = "ckey"
	aCause     = "cause"
	aRaw       = "raw"
	aTruncated = "truncated"
	aCreated   = "created_at"
	aReceived  = "received_at"
	aExpires   = "expires_at"
	aAttempts  = "attempts"
	aFirst     = "first_at"
	aNext      = "next_at"
	aLastErr   = "last_error"
	aToken     = "token"
	aDeadAt    = "dead_at"
	aReason    = "dead_reason"
	aState     = "state" // key items: live, dead or done
	aLocPK     = "loc_pk"
	aLocSK     = "loc_sk"
	aSize      = "size"
	aTTL       = "ttl" // epoch seconds: DynamoDB's TTL deletes the item after it
	aCounter   = "n"   // partition items: the last Seq counter committed
	aParts     = "parts"
	aName      = "name"
	aOwner     = "owner"
	aUntil     = "until"
)

const (
	metaSK    = "m" // the partition item, after every Seq sort key
	regPK     = "reg"
	leaseReg  = "leases"
	ptrSK     = "c"
	leaseSK   = "l"
	maxParts  = 1 << partBits
	partBits  = 10
	maxReason = 4 << 10
	// maxItemBytes keeps a record under DynamoDB's 400 KB item limit with
	// room for what dead-lettering adds (a reason of up to maxReason).
	maxItemBytes = 390_000
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
func keyPK(id string) string                 { return "k#" + digest(id) }
func keySK(session, route string) string     { return digest(session, route) }
func deadPK(route string) string             { return "d#" + bound(route) }
func statsPK(session string) string          { return "s#" + bound(session) }
func leasePK(name string) string             { return "l#" + bound(name) }
func ptrPK(session, route, ck string) string {
	return "c#" + digest(session, route, ck)
}

// deadSK orders a route's dead letters by DeadAt, then Seq; the digest of
// the key keeps letters of different sessions apart.
func deadSK(r *stores.Record) string {
	return deadPrefix(nanos(r.DeadAt), r.Seq) + "." + keySK(r.Session, r.Envelope.ID)[:16]
}

func deadPrefix(deadAt, seq int64) string { return fmt.Sprintf("%020d.%019d", max(deadAt, 0), seq) }

func key(pk, sk string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{aPK: vS(pk), aSK: vS(sk)}
}

func vS(s string) types.AttributeValue { return &types.AttributeValueMemberS{Value: s} }
func vN(n int64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(n, 10)}
}
func vT(t time.Time) types.AttributeValue {
	return vN(nanos(t))
}

func nanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func getS(it map[string]types.AttributeValue, k string) string {
	v, _ := it[k].(*types.AttributeValueMemberS)
	if v == nil {
		return ""
	}
	return v.Value
}

func getN(it map[string]types.AttributeValue, k string) int64 {
	v, _ := it[k].(*types.AttributeValueMemberN)
	if v == nil {
		return 0
	}
	n, _ := strconv.ParseInt(v.Value, 10, 64)
	return n
}

func getT(it map[string]types.AttributeValue, k string) time.Time {
	if n := getN(it, k); n != 0 {
		return time.Unix(0, n).UTC()
	}
	return time.Time{}
}

func getB(it map[string]types.AttributeValue, k string) bool {
	v, _ := it[k].(*types.AttributeValueMemberBOOL)
	return v != nil && v.Value
}

// encode returns the item of r at (pk, sk): the whole record. Unset
// optional fields are left out; times are Unix nanoseconds.
func encode(r *stores.Record, pk, sk string) map[string]types.AttributeValue {
	e := &r.Envelope
	it := key(pk, sk)
	it[aSession], it[aRoute], it[aPart], it[aSeq] = vS(r.Session), vS(r.Route), vN(int64(r.Partition)), vN(r.Seq)
	it[aID], it[aTopic], it[aQoS] = vS(e.ID), vS(e.Topic), vN(int64(e.QoS))
	it[aCreated], it[aReceived], it[aToken], it[aAttempts] = vT(r.CreatedAt), vT(e.ReceivedAt), vN(r.Token), vN(int64(r.Attempts))
	opt := func(name, v string) {
		if v != "" {
			it[name] = vS(v)
		}
	}
	opt(aOrderKey, e.Key)
	opt(aCoKey, r.CoalesceKey)
	opt(aCause, r.CausationID)
	opt(aLastErr, clip(r.LastError))
	opt(aReason, clip(r.DeadReason))
	for name, t := range map[string]time.Time{aExpires: r.ExpiresAt, aFirst: r.FirstAttemptAt, aNext: r.NextAttemptAt, aDeadAt: r.DeadAt} {
		if !t.IsZero() {
			it[name] = vT(t)
		}
	}
	if len(e.Payload) > 0 {
		it[aPayload] = &types.AttributeValueMemberB{Value: e.Payload}
	}
	if len(e.Headers) > 0 {
		h := make(map[string]types.AttributeValue, len(e.Headers))
		for k, v := range e.Headers {
			h[k] = vS(v)
		}
		it[aHeaders] = &types.AttributeValueMemberM{Value: h}
	}
	if r.Raw {
		it[aRaw] = &types.AttributeValueMemberBOOL{Value: true}
	}
	if r.Truncated {
		it[aTruncated] = &types.AttributeValueMemberBOOL{Value: true}
	}
	return it
}

// clip bounds an error text kept in an item.
func clip(s string) string {
	if len(s) > maxReason {
		return s[:maxReason]
	}
	return s
}

// decode turns a record or dead-letter item back into a Record.
func decode(it map[string]types.AttributeValue, state stores.State) stores.Record {
	r := stores.Record{
		Session: getS(it, aSession), Partition: int(getN(it, aPart)), Route: getS(it, aRoute),
		Envelope: message.Envelope{
			ID: getS(it, aID), Topic: getS(it, aTopic), QoS: byte(getN(it, aQoS)),
			ReceivedAt: getT(it, aReceived), Key: getS(it, aOrderKey),
		},
		CoalesceKey: getS(it, aCoKey), CausationID: getS(it, aCause),
		Raw: getB(it, aRaw), Truncated: getB(it, aTruncated),
		State: state, Seq: getN(it, aSeq), CreatedAt: getT(it, aCreated), Token: getN(it, aToken),
		Attempts: int(getN(it, aAttempts)), FirstAttemptAt: getT(it, aFirst), NextAttemptAt: getT(it, aNext),
		LastError: getS(it, aLastErr), ExpiresAt: getT(it, aExpires),
		DeadAt: getT(it, aDeadAt), DeadReason: getS(it, aReason),
	}
	if v, ok := it[aPayload].(*types.AttributeValueMemberB); ok {
		r.Envelope.Payload = v.Value
	}
	if v, ok := it[aHeaders].(*types.AttributeValueMemberM); ok {
		r.Envelope.Headers = make(map[string]string, len(v.Value))
		for k, e := range v.Value {
			if s, ok := e.(*types.AttributeValueMemberS); ok {
				r.Envelope.Headers[k] = s.Value
			}
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
