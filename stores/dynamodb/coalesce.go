package dynamodb

import (
	"slices"
	"time"

	"github.com/gobridge/gobridge/stores"
)

// group is the coalescing state of one (session, route, coalesce key)
// during a Write. The table keeps a pointer item per key naming the newest
// unclaimed record of the key (the one waiting); a claim does not clear it,
// so the record it names may have been claimed or settled since: the
// conditions on that record find out, and the group then ignores it.
type group struct {
	pk, session, route string
	ptr                item // the pointer as in the table; nil: none
	ignore             bool // the record ptr names is claimed or gone

	// Set by coalesce for the current attempt.
	cur     *op  // the append of this transaction now waiting
	waiting bool // the record ptr names is still waiting
	check   bool // it absorbed an append: it must still be unclaimed
	replace bool // an append replaces it: delete it
}

// coalesce decides, in batch order, which appends with a coalesce key are
// absorbed by a newer waiting record and which replace the one waiting
// (stores.Supersedes at now), as the memory backend does: an append claimed
// replaces older waiting records but never waits itself, and one replaced
// by a later append of c is gone (inserted, then replaced: a tombstone). It
// returns the groups of c.
func coalesce(c []*op, now time.Time) []*group {
	var groups []*group
	for _, o := range c {
		if g := o.g; g != nil && !o.skip && !slices.Contains(groups, g) {
			g.cur, g.waiting, g.check, g.replace = nil, g.ptr != nil && !g.ignore, false, false
			groups = append(groups, g)
		}
	}
	for _, o := range c {
		g := o.g
		if g == nil || o.skip {
			continue
		}
		if g.cur == nil && g.waiting && getS(g.ptr, "id") == o.r.Envelope.ID {
			o.skip = true // the waiting record itself, appended again
			continue
		}
		recv := nanos(o.r.Envelope.ReceivedAt)
		later := func(n int64) bool { return n > recv && n <= nanos(now) }
		switch {
		case g.cur != nil && later(nanos(g.cur.r.Envelope.ReceivedAt)):
			o.absorbed = true
			continue
		case g.cur == nil && g.waiting && later(getN(g.ptr, "received_at")):
			o.absorbed, g.check = true, true
			continue
		case g.cur != nil:
			g.cur.gone = true
		case g.waiting:
			g.waiting, g.replace = false, true
		}
		g.cur = nil
		if o.token == 0 {
			g.cur = o
		}
	}
	return groups
}

// key is the key of record id of g's session and route.
func (g *group) key(id string) stores.Key {
	return stores.Key{Session: g.session, Route: g.route, ID: id}
}

// pointer adds the items of group g: the replaced record's delete and
// tombstone (or the check that the record that absorbed appends still
// waits), and the pointer to the new waiting record.
func (t *txn) pointer(g *group, ttl int64) {
	s, ro := t.s, func(item) { g.ignore = true } // the record the pointer names was claimed or settled
	switch {
	case g.replace:
		t.add(ro, s.tw(loc(g.ptr), "delete", "#token = :zero", ":zero", 0))
		t.tombstone(ro, keyOf(g.key(getS(g.ptr, "id"))), stores.Live, ttl)
		t.count(g.session, g.route, -1, -getN(g.ptr, "size"), 0)
	case g.check:
		t.add(ro, s.tw(loc(g.ptr), "", "#token = :zero", ":zero", 0))
	}
	if g.cur == nil {
		if g.replace {
			t.after = append(t.after, func() { g.ignore = true })
		}
		return
	}
	r := &g.cur.r
	ptr := key(g.pk, ptrSK)
	ptr["id"], ptr["loc_pk"], ptr["loc_sk"] = av(r.Envelope.ID), av(g.cur.pk), av(seqSK(r.Seq))
	ptr["received_at"], ptr["size"] = av(r.Envelope.ReceivedAt), av(r.Size())
	cond, kv := "attribute_not_exists(pk)", []any(nil)
	if g.ptr != nil {
		cond, kv = "#id = :id", []any{":id", getS(g.ptr, "id")}
	}
	// Moved by another process: take it as the cancellation returned it
	// (and back off, as for a partition counter: processes appending the
	// same keys would otherwise retry in lockstep).
	t.add(func(old item) {
		g.ptr, g.ignore, t.busy = old, false, true
		s.learn(old)
	}, s.tw(ptr, "put", cond, kv...))
	t.after = append(t.after, func() { g.ptr, g.ignore = ptr, false })
}
