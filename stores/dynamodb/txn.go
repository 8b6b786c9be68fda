package dynamodb

import (
	"cmp"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/gobridge/gobridge/stores"
)

// txn is one transaction being built: its items, what to change in the
// plan when the condition of one fails, the stats deltas, and what to
// remember once it has committed.
type txn struct {
	s      *Store
	items  []types.TransactWriteItem
	replan []func(old item) // by item; nil for items without a condition
	after  []func()
	stats  map[string]*counts // by session: the changes
	busy   bool               // set by replan: another process appended to a partition (or a coalesce key) first
}

func (t *txn) add(replan func(old item), it types.TransactWriteItem) {
	t.items = append(t.items, it)
	t.replan = append(t.replan, replan)
}

func (t *txn) count(session, route string, live, bytes, dead int64) {
	c := sessionCounts(t.stats, session)
	for j, n := range [3]int64{live, bytes, dead} {
		c.add(route, j, n)
	}
}

// tombstone turns the key item k from state from into done, kept until ttl.
func (t *txn) tombstone(replan func(item), k item, from stores.State, ttl int64) {
	t.add(replan, t.s.tw(k, "SET #state = :done, #ttl = :ttl REMOVE #loc_pk, #loc_sk", "#state = :from",
		":done", "done", ":ttl", ttl, ":from", string(from)))
}

// at is the key of the item an append writes its record to, at its Seq.
func (o *op) at() (pk, sk string) {
	if o.r.State == stores.Dead {
		return deadPK(o.r.Route), deadSK(&o.r)
	}
	return o.pk, seqSK(o.r.Seq)
}

// build makes the transaction of chunk c from the ops' current state.
func (s *Store) build(c []*op, now time.Time) *txn {
	t := &txn{s: s, stats: map[string]*counts{}}
	ttl := s.server(now).Add(doneRetention).Unix() // DynamoDB deletes it by its own clock
	// Appends claimed: one token per partition, the largest, is checked
	// against the partition's lease; the others are appended unclaimed.
	tokens := map[string]int64{}
	for _, o := range c {
		if o.rec != nil && !o.skip && o.lease {
			tokens[o.pk] = max(tokens[o.pk], o.r.Token)
		}
	}
	for _, o := range c {
		o.absorbed, o.gone, o.token = false, false, 0
		if o.rec != nil && o.lease && o.r.Token == tokens[o.pk] {
			o.token = o.r.Token
		}
	}
	groups := coalesce(c, now)

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
		ki := keyOf(r.Key())
		dup := func(item) { o.skip = true }
		if o.gone { // inserted and replaced at once
			ki["state"], ki["ttl"] = av("done"), av(ttl)
			t.add(dup, s.tw(ki, "put", "attribute_not_exists(pk)"))
			continue
		}
		w := *r
		w.Token = o.token
		lpk, lsk := o.at()
		if r.State == stores.Dead {
			t.count(r.Session, r.Route, 0, 0, 1)
		} else {
			t.count(r.Session, r.Route, 1, r.Size(), 0)
		}
		t.add(nil, s.tw(encode(&w, lpk, lsk), "put", ""))
		ki["state"], ki["loc_pk"], ki["loc_sk"], ki["size"] = av(string(r.State)), av(lpk), av(lsk), av(r.Size())
		t.add(dup, s.tw(ki, "put", "attribute_not_exists(pk)")) // a duplicate
	}
	for _, g := range groups {
		t.pointer(g, ttl)
	}
	for _, pk := range order {
		p := parts[pk]
		// Another process committed a later Seq first: plan above it.
		t.add(func(old item) { s.seqs[pk], t.busy = getN(old, "n"), true }, s.tw(key(pk, metaSK), "SET #n = :n",
			"attribute_not_exists(#n) OR #n < :first", ":n", p.n, ":first", p.first))
		if p.token != 0 {
			// Not the partition's current token: append unclaimed.
			t.add(func(item) {
				for _, o := range c {
					if o.rec != nil && o.pk == pk {
						o.lease = false
					}
				}
			}, s.leaseCheck(stores.PartitionLease(p.session, p.num), p.token))
		}
		sessionCounts(t.stats, p.session).parts[strconv.Itoa(p.num)] = true
		n := p.n
		t.after = append(t.after, func() { s.seqs[pk] = n })
	}
	t.addStats()
	return t
}

// settle adds the items of one settlement.
func (t *txn) settle(o *op, now time.Time, ttl int64) {
	st, s := o.st, t.s
	at, size := loc(o.ki), getN(o.ki, "size")
	ro := func(item) { o.skip, o.st.Stale = true, true } // not live under the token (or not dead) any more
	switch st.Outcome {
	case stores.Done:
		t.add(ro, s.tw(at, "delete", "#token = :token", ":token", st.Token))
		t.tombstone(ro, keyOf(st.Key), stores.Live, ttl)
		t.count(st.Session, st.Route, -1, -size, 0)
	case stores.Retry:
		t.add(ro, s.tw(at, "SET #attempts = :a, #first_at = :f, #next_at = :n, #last_error = :e", "#token = :token",
			":a", st.Attempts, ":f", st.FirstAttemptAt, ":n", st.NextAttemptAt, ":e", clip(st.Reason), ":token", st.Token))
	case stores.DeadLetter:
		r := decode(o.body, stores.Dead)
		r.Token, r.DeadReason, r.DeadAt = 0, st.Reason, cmp.Or(st.At, now)
		r.Attempts, r.FirstAttemptAt, r.LastError = st.Attempts, st.FirstAttemptAt, st.Reason
		for _, rt := range o.replaced { // Retries of this batch before it: they applied first
			r.NextAttemptAt = rt.NextAttemptAt
		}
		dpk, dsk := deadPK(r.Route), deadSK(&r)
		t.add(nil, s.tw(encode(&r, dpk, dsk), "put", ""))
		t.add(ro, s.tw(at, "delete", "#token = :token", ":token", st.Token))
		t.add(ro, s.tw(keyOf(st.Key), "SET #state = :dead, #loc_pk = :lp, #loc_sk = :ls", "#state = :live",
			":dead", string(stores.Dead), ":live", string(stores.Live), ":lp", dpk, ":ls", dsk))
		t.count(st.Session, st.Route, -1, -size, 1)
	case stores.Drop:
		t.add(ro, s.tw(at, "delete", "attribute_exists(pk)"))
		t.tombstone(ro, keyOf(st.Key), stores.Dead, ttl)
		t.count(st.Session, st.Route, 0, 0, -1)
	}
}
