package dynamodb

import (
	"cmp"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/gobridge/gobridge/stores"
)

// What a transaction item stands for, so that a cancellation reason can be
// turned into a change of plan.
type roleKind int

const (
	roleNone     roleKind = iota
	roleKey               // an appended record's key item (condition: new)
	roleSettle            // a settled record or its key item (condition: its state and token)
	roleCounter           // a partition counter (condition: its value as this process saw it)
	roleLease             // a partition lease check for appends claimed
	roleReplaced          // the record a coalesce pointer names (condition: unclaimed)
	rolePointer           // a coalesce pointer (condition: as read)
)

type role struct {
	kind roleKind
	op   *op
	pk   string
	g    *group
}

// txn is one transaction being built: its items, what each stands for,
// the stats deltas, and what to remember once it has committed.
type txn struct {
	s     *Store
	items []types.TransactWriteItem
	roles []role
	after []func()
	stats map[[2]string]*[3]int64 // (session, route) → live, bytes, dead
	regs  map[string]bool
}

func (t *txn) add(ro role, it types.TransactWriteItem) {
	t.items = append(t.items, it)
	t.roles = append(t.roles, ro)
}

func (t *txn) count(session, route string, live, bytes, dead int64) {
	d := t.stats[[2]string{session, route}]
	if d == nil {
		d = &[3]int64{}
		t.stats[[2]string{session, route}] = d
	}
	d[0], d[1], d[2] = d[0]+live, d[1]+bytes, d[2]+dead
}

func (t *txn) put(ro role, it map[string]types.AttributeValue, cond string) {
	p := &types.Put{TableName: t.s.table, Item: it}
	if cond != "" {
		p.ConditionExpression = aws.String(cond)
	}
	t.add(ro, types.TransactWriteItem{Put: p})
}

func (t *txn) update(ro role, k map[string]types.AttributeValue, expr, cond string, names map[string]string, vals map[string]types.AttributeValue) {
	u := &types.Update{TableName: t.s.table, Key: k, UpdateExpression: aws.String(expr),
		ExpressionAttributeNames: names, ExpressionAttributeValues: vals,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld}
	if cond != "" {
		u.ConditionExpression = aws.String(cond)
	}
	t.add(ro, types.TransactWriteItem{Update: u})
}

// del deletes the record or dead letter at k under cond on its token.
func (t *txn) del(ro role, k map[string]types.AttributeValue, cond string, vals map[string]types.AttributeValue) {
	t.add(ro, types.TransactWriteItem{Delete: &types.Delete{TableName: t.s.table, Key: k,
		ConditionExpression: aws.String(cond), ExpressionAttributeNames: map[string]string{"#tok": aToken},
		ExpressionAttributeValues: vals}})
}

// tombstone turns the key item k from state from into done, kept until ttl.
func (t *txn) tombstone(ro role, k map[string]types.AttributeValue, from stores.State, ttl int64) {
	t.update(ro, k, "SET #st = :done, #ttl = :ttl REMOVE #lp, #ls", "#st = :from",
		map[string]string{"#st": aState, "#ttl": aTTL, "#lp": aLocPK, "#ls": aLocSK},
		map[string]types.AttributeValue{":done": vS("done"), ":ttl": vN(ttl), ":from": vS(string(from))})
}

// known reports whether this process has written registry item id.
func (t *txn) known(id string) bool {
	t.s.mu.Lock()
	defer t.s.mu.Unlock()
	return t.s.known[id] || t.regs[id]
}

// register adds the registry update of k, which this process then knows
// as ids (a session's partitions, a route with dead letters).
func (t *txn) register(ids []string, k map[string]types.AttributeValue, expr string, names map[string]string, vals map[string]types.AttributeValue) {
	for _, id := range ids {
		t.regs[id] = true
	}
	t.update(role{}, k, expr, "", names, vals)
	t.after = append(t.after, func() {
		t.s.mu.Lock()
		for _, id := range ids {
			t.s.known[id] = true
		}
		t.s.mu.Unlock()
	})
}

func (t *txn) registerRoute(route string) {
	if t.known("r " + route) {
		return
	}
	t.register([]string{"r " + route}, key(regPK, "r#"+bound(route)), "SET #name = :name",
		map[string]string{"#name": aName}, map[string]types.AttributeValue{":name": vS(route)})
}

// build makes the transaction of chunk c from the ops' current state.
func (s *Store) build(c []*op, now time.Time) *txn {
	t := &txn{s: s, stats: map[[2]string]*[3]int64{}, regs: map[string]bool{}}
	ttl := now.Add(s.retention).Unix()
	// Appends claimed: one token per partition, the largest, is checked
	// against the partition's lease; the others are appended unclaimed.
	tokens := map[string]int64{}
	for _, o := range c {
		if o.rec != nil && !o.skip && o.lease {
			tokens[o.pk] = max(tokens[o.pk], o.r.Token)
		}
	}
	for _, o := range c {
		o.absorbed, o.token = false, 0
		if o.rec != nil && o.lease && o.r.Token == tokens[o.pk] {
			o.token = o.r.Token
		}
	}
	groups := coalesce(c)

	type part struct {
		first, n, token int64
		session         string
		num             int
	}
	parts := map[string]*part{}
	var order []string
	for _, o := range c {
		if o.skip || o.absorbed {
			continue
		}
		if o.st != nil {
			t.settle(o, now, ttl)
			continue
		}
		r := &o.r
		p := parts[o.pk]
		if p == nil {
			// The counter follows the clock (microseconds) where it can:
			// processes appending to one partition then refuse each
			// other's commits only when they commit out of the order in
			// which they planned them.
			n := max(s.seqs[o.pk], time.Now().UnixMicro())
			p = &part{first: n + 1, n: n, session: r.Session, num: r.Partition}
			parts[o.pk] = p
			order = append(order, o.pk)
		}
		p.n++
		r.Seq = p.n<<partBits | int64(r.Partition)
		p.token = max(p.token, o.token)
		w := *r
		w.Token = o.token
		lpk, lsk := o.pk, seqSK(r.Seq)
		if r.State == stores.Dead {
			lpk, lsk = deadPK(r.Route), deadSK(r)
			t.count(r.Session, r.Route, 0, 0, 1)
			t.registerRoute(r.Route)
		} else {
			t.count(r.Session, r.Route, 1, r.Size(), 0)
		}
		t.put(role{}, encode(&w, lpk, lsk), "")
		ki := key(keyPK(r.Envelope.ID), keySK(r.Session, r.Route))
		ki[aState], ki[aLocPK], ki[aLocSK], ki[aSize] = vS(string(r.State)), vS(lpk), vS(lsk), vN(r.Size())
		t.put(role{kind: roleKey, op: o}, ki, "attribute_not_exists(pk)")
	}
	for _, g := range groups {
		t.pointer(g, ttl)
	}
	newParts := map[string][]int{}
	for _, pk := range order {
		p := parts[pk]
		t.update(role{kind: roleCounter, pk: pk}, key(pk, metaSK), "SET #n = :n", "attribute_not_exists(#n) OR #n < :first",
			map[string]string{"#n": aCounter}, map[string]types.AttributeValue{":n": vN(p.n), ":first": vN(p.first)})
		if p.token != 0 {
			t.add(role{kind: roleLease, pk: pk}, s.leaseCheck(stores.PartitionLease(p.session, p.num), p.token))
		}
		if !t.known("p " + pk) {
			newParts[p.session] = append(newParts[p.session], p.num)
		}
		n := p.n
		t.after = append(t.after, func() { s.seqs[pk] = n })
	}
	for session, nums := range newParts {
		var ids, ns []string
		for _, n := range nums {
			ids, ns = append(ids, "p "+partPK(session, n)), append(ns, strconv.Itoa(n))
		}
		t.register(ids, key(regPK, "s#"+bound(session)), "SET #name = :name ADD #parts :p",
			map[string]string{"#name": aName, "#parts": aParts},
			map[string]types.AttributeValue{":name": vS(session), ":p": &types.AttributeValueMemberNS{Value: ns}})
	}
	t.addStats()
	return t
}

// addStats adds one update per session of a random stats shard, so that
// writers rarely touch the same item.
func (t *txn) addStats() {
	shard := strconv.Itoa(rand.N(statsShards))
	type upd struct {
		expr  string
		names map[string]string
		vals  map[string]types.AttributeValue
	}
	bySession := map[string]*upd{}
	for sr, d := range t.stats {
		u := bySession[sr[0]]
		if u == nil {
			u = &upd{names: map[string]string{}, vals: map[string]types.AttributeValue{}}
			bySession[sr[0]] = u
		}
		for j, prefix := range []string{"l#", "b#", "d#"} {
			if d[j] != 0 {
				n := strconv.Itoa(len(u.names))
				u.names["#a"+n], u.vals[":a"+n] = prefix+sr[1], vN(d[j])
				u.expr += ", #a" + n + " :a" + n
			}
		}
	}
	for session, u := range bySession {
		if u.expr != "" {
			t.update(role{}, key(statsPK(session), shard), "ADD"+u.expr[1:], "", u.names, u.vals)
		}
	}
}

// statsShards is how many stats items a session's counts are spread over.
const statsShards = 16

// settle adds the items of one settlement.
func (t *txn) settle(o *op, now time.Time, ttl int64) {
	st := o.st
	at, size := loc(o.ki), getN(o.ki, aSize)
	ro := role{kind: roleSettle, op: o}
	tok := map[string]types.AttributeValue{":tok": vN(st.Token)}
	switch st.Outcome {
	case stores.Done:
		t.del(ro, at, "#tok = :tok", tok)
		t.tombstone(ro, keyOf(st.Key), stores.Live, ttl)
		t.count(st.Session, st.Route, -1, -size, 0)
	case stores.Retry:
		t.update(ro, at, "SET #att = :att, #fa = :fa, #na = :na, #le = :le", "#tok = :tok",
			map[string]string{"#att": aAttempts, "#fa": aFirst, "#na": aNext, "#le": aLastErr, "#tok": aToken},
			map[string]types.AttributeValue{":att": vN(int64(st.Attempts)), ":fa": vT(st.FirstAttemptAt),
				":na": vT(st.NextAttemptAt), ":le": vS(clip(st.Reason)), ":tok": vN(st.Token)})
	case stores.DeadLetter:
		r := decode(o.body, stores.Dead)
		r.Token, r.DeadReason, r.DeadAt = 0, st.Reason, cmp.Or(st.At, now)
		r.Attempts, r.FirstAttemptAt, r.LastError = st.Attempts, st.FirstAttemptAt, st.Reason
		dpk, dsk := deadPK(r.Route), deadSK(&r)
		t.put(role{}, encode(&r, dpk, dsk), "")
		t.del(ro, at, "#tok = :tok", tok)
		t.update(ro, keyOf(st.Key), "SET #st = :dead, #lp = :lp, #ls = :ls", "#st = :live",
			map[string]string{"#st": aState, "#lp": aLocPK, "#ls": aLocSK},
			map[string]types.AttributeValue{":dead": vS(string(stores.Dead)), ":live": vS(string(stores.Live)), ":lp": vS(dpk), ":ls": vS(dsk)})
		t.count(st.Session, st.Route, -1, -size, 1)
		t.registerRoute(r.Route)
	case stores.Drop:
		t.add(ro, types.TransactWriteItem{Delete: &types.Delete{TableName: t.s.table, Key: at,
			ConditionExpression: aws.String("attribute_exists(pk)")}})
		t.tombstone(ro, keyOf(st.Key), stores.Dead, ttl)
		t.count(st.Session, st.Route, 0, 0, -1)
	}
}
