package dynamodb

import (
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/gobridge/gobridge/message"
	"github.com/gobridge/gobridge/stores"
)

// Attribute names of a record item. GSI key attributes are present only
// while the record is in the state the index serves (sparse indexes).
const (
	aPK        = "pk"
	aSK        = "sk"
	aSession   = "session"
	aRoute     = "route"
	aPart      = "part"
	aID        = "id"
	aTopic     = "topic"
	aPayload   = "payload"
	aHeaders   = "headers"
	aQoS       = "qos"
	aReceived  = "received_at"
	aOrderKey  = "okey"
	aCoKey     = "ckey"
	aCause     = "cause"
	aState     = "state"
	aSeq       = "seq"
	aAttempts  = "attempts"
	aFirst     = "first_at"
	aNext      = "next_at"
	aLastErr   = "last_error"
	aCreated   = "created_at"
	aExpires   = "expires_at"
	aToken     = "token"
	aUntil     = "claim_until"
	aDeadAt    = "dead_at"
	aDeadWhy   = "dead_reason"
	aGC        = "gc_at" // TTL attribute (epoch seconds) of done tombstones
	aPartPK    = "part_pk"
	aReadyPK   = "ready_pk" // GSI ready: (ready_pk, seq), pending and due at append
	aTimerPK   = "timer_pk" // GSI timer: (timer_pk, timer_at), claimed or released
	aTimerAt   = "timer_at" //   claim deadline or next attempt, unix ns
	aLivePK    = "live_pk"  // GSI live: (live_pk, seq), pending or claimed
	aKeyPK     = "key_pk"   // GSI okey: (key_pk, seq), live records with an ordering key
	aCoPK      = "co_pk"    // GSI coalesce: (co_pk, received_at), pending (not while claimed)
	aDeadAll   = "dead_all" // GSI dead: (dead_all, dead_sk)
	aDeadRoute = "dead_rpk" // GSI dead_route: (dead_rpk, dead_sk)
	aDeadSK    = "dead_sk"  //   %020d DeadAt ns . %020d Seq
	aValue     = "v"        // counter value
	aParts     = "parts"    // partitions a session\'s records went to (NS)
	aDeadCount = "dead"     // dead letters of a (session, route) counter
	aSessions  = "sessions" // the session registry (SS)
)

// Index names.
const (
	idxReady     = "ready"
	idxTimer     = "timer"
	idxLive      = "live"
	idxOrderKey  = "okey"
	idxCoalesce  = "coalesce"
	idxDead      = "dead"
	idxDeadRoute = "dead_route"
)

// maxPayload keeps an item under DynamoDB's 400 KB limit with room for the
// bookkeeping attributes and headers.
const maxItemBytes = 380 << 10

// enc makes a string safe to join with others: its length, a colon, itself.
func enc(s string) string { return strconv.Itoa(len(s)) + ":" + s }

func recordPK(id string) string               { return "r#" + id }
func recordSK(session, route string) string   { return enc(session) + "|" + route }
func partPK(session string, part int) string  { return enc(session) + "#" + strconv.Itoa(part) }
func keyPK(session, key string) string        { return enc(session) + "#" + key }
func coPK(session, route, ckey string) string { return enc(session) + "|" + enc(route) + "|" + ckey }
func counterPK(session string) string         { return "s#" + session }
func deadSK(deadAt time.Time, seq int64) string {
	return fmt.Sprintf("%020d.%020d", nanos(deadAt), seq)
}

const seqPK, seqSK = "meta#seq", "meta"

func recordKey(session, route, id string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{aPK: vS(recordPK(id)), aSK: vS(recordSK(session, route))}
}

func vS(s string) types.AttributeValue { return &types.AttributeValueMemberS{Value: s} }
func vN(n int64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(n, 10)}
}
func vB(b []byte) types.AttributeValue    { return &types.AttributeValueMemberB{Value: b} }
func vT(t time.Time) types.AttributeValue { return vN(nanos(t)) }

func nanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func fromNanos(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}

// newItem encodes a fresh record (State set by the caller) with its index
// attributes.
func newItem(r *stores.Record, gcAt time.Time) map[string]types.AttributeValue {
	e := &r.Envelope
	it := map[string]types.AttributeValue{
		aPK: vS(recordPK(e.ID)), aSK: vS(recordSK(r.Session, r.Route)),
		aSession: vS(r.Session), aRoute: vS(r.Route), aPart: vN(int64(r.Partition)), aID: vS(e.ID),
		aState: vS(string(r.State)), aSeq: vN(r.Seq), aCreated: vT(r.CreatedAt),
		aPartPK: vS(partPK(r.Session, r.Partition)),
	}
	if r.State == stores.Done {
		it[aGC] = vN(gcAt.Unix())
		return it
	}
	it[aTopic] = vS(e.Topic)
	if len(e.Payload) > 0 {
		it[aPayload] = vB(e.Payload)
	}
	if len(e.Headers) > 0 {
		h := make(map[string]types.AttributeValue, len(e.Headers))
		for k, v := range e.Headers {
			h[k] = vS(v)
		}
		it[aHeaders] = &types.AttributeValueMemberM{Value: h}
	}
	it[aQoS] = vN(int64(e.QoS))
	it[aReceived] = vT(e.ReceivedAt)
	if e.Key != "" {
		it[aOrderKey] = vS(e.Key)
		it[aKeyPK] = vS(keyPK(r.Session, e.Key))
	}
	if r.CoalesceKey != "" {
		it[aCoKey] = vS(r.CoalesceKey)
		it[aCoPK] = vS(coPK(r.Session, r.Route, r.CoalesceKey))
	}
	if r.CausationID != "" {
		it[aCause] = vS(r.CausationID)
	}
	it[aAttempts] = vN(int64(r.Attempts))
	it[aFirst] = vT(r.FirstAttemptAt)
	it[aNext] = vT(r.NextAttemptAt)
	if r.LastError != "" {
		it[aLastErr] = vS(r.LastError)
	}
	it[aExpires] = vT(r.ExpiresAt)
	it[aLivePK] = it[aPartPK]
	if nanos(r.NextAttemptAt) <= nanos(r.CreatedAt) {
		it[aReadyPK] = it[aPartPK]
	} else {
		it[aTimerPK] = it[aPartPK]
		it[aTimerAt] = vT(r.NextAttemptAt)
	}
	return it
}

// itemSize estimates the stored size of an item (names plus values).
func itemSize(it map[string]types.AttributeValue) int {
	n := 0
	for k, v := range it {
		n += len(k) + valueSize(v)
	}
	return n
}

func valueSize(v types.AttributeValue) int {
	switch v := v.(type) {
	case *types.AttributeValueMemberS:
		return len(v.Value)
	case *types.AttributeValueMemberB:
		return len(v.Value)
	case *types.AttributeValueMemberN:
		return 21
	case *types.AttributeValueMemberM:
		n := 3
		for k, e := range v.Value {
			n += len(k) + valueSize(e) + 1
		}
		return n
	}
	return 8
}

func getS(it map[string]types.AttributeValue, k string) string {
	if v, ok := it[k].(*types.AttributeValueMemberS); ok {
		return v.Value
	}
	return ""
}

func getN(it map[string]types.AttributeValue, k string) int64 {
	if v, ok := it[k].(*types.AttributeValueMemberN); ok {
		n, _ := strconv.ParseInt(v.Value, 10, 64)
		return n
	}
	return 0
}

func getT(it map[string]types.AttributeValue, k string) time.Time { return fromNanos(getN(it, k)) }

// decode turns a record item back into a Record.
func decode(it map[string]types.AttributeValue) stores.Record {
	r := stores.Record{
		Session:   getS(it, aSession),
		Partition: int(getN(it, aPart)),
		Route:     getS(it, aRoute),
		Envelope: message.Envelope{
			ID:         getS(it, aID),
			Topic:      getS(it, aTopic),
			QoS:        byte(getN(it, aQoS)),
			ReceivedAt: getT(it, aReceived),
			Key:        getS(it, aOrderKey),
		},
		CoalesceKey:    getS(it, aCoKey),
		CausationID:    getS(it, aCause),
		State:          stores.State(getS(it, aState)),
		Seq:            getN(it, aSeq),
		Attempts:       int(getN(it, aAttempts)),
		FirstAttemptAt: getT(it, aFirst),
		NextAttemptAt:  getT(it, aNext),
		LastError:      getS(it, aLastErr),
		CreatedAt:      getT(it, aCreated),
		ExpiresAt:      getT(it, aExpires),
		Token:          getN(it, aToken),
		ClaimUntil:     getT(it, aUntil),
		DeadAt:         getT(it, aDeadAt),
		DeadReason:     getS(it, aDeadWhy),
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

// splitSK parses a record sort key back into session and route.
func splitSK(sk string) (session, route string, ok bool) {
	n := 0
	i := 0
	for ; i < len(sk) && sk[i] >= '0' && sk[i] <= '9'; i++ {
		n = n*10 + int(sk[i]-'0')
		if n > len(sk) {
			return "", "", false
		}
	}
	if i == 0 || i >= len(sk) || sk[i] != ':' || i+1+n >= len(sk) || sk[i+1+n] != '|' {
		return "", "", false
	}
	return sk[i+1 : i+1+n], sk[i+2+n:], true
}
