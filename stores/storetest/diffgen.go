package storetest

import (
	"fmt"
	"slices"
	"time"

	"github.com/gobridge/gobridge/message"
	"github.com/gobridge/gobridge/stores"
)

// write is a Write of 0-3 appends and 0-3 settlements. The byte that
// counts the settlements also says, in its top bits, that each settlement
// after the first settles the record the one before it settled, again
// (0x80: a Retry followed by what the drainer decided next, or anything
// after a final outcome), and that the record the first one settles is
// appended again at the end of the batch (0x40: a producer's duplicate
// group-committed with its settlement).
func (d *diff) write(what string) {
	t, e := d.t, d.e
	ctx := t.Context()
	var b stores.Batch
	for range d.pick(4) {
		b.Append = append(b.Append, d.record())
	}
	n := d.next()
	var last *stores.Record // the record the last settlement settles
	for range n % 4 {
		var prev *stores.Settlement
		if n&0x80 == 0 || len(b.Settle) == 0 {
			last = nil
		} else {
			prev = &b.Settle[len(b.Settle)-1]
		}
		if st, r, ok := d.settlement(last, prev); ok {
			b.Settle, last = append(b.Settle, st), r
		}
	}
	if n&0x40 != 0 && len(b.Settle) > 0 {
		if i := slices.IndexFunc(d.all, func(r stores.Record) bool { return r.Key() == b.Settle[0].Key }); i >= 0 {
			b.Append = append(b.Append, d.all[i])
		}
	}
	d.all = append(d.all, b.Append...)
	bm, bs := clone(b), clone(b)
	for i := range bs.Append {
		bs.Append[i].Token = d.sut(bs.Append[i].Token)
	}
	for i := range bs.Settle {
		bs.Settle[i].Token = d.sut(bs.Settle[i].Token)
	}
	d.same(what, e.Ref.Write(ctx, &bm), e.Store.Write(ctx, &bs))
	for i := range bm.Settle {
		if bm.Settle[i].Stale != bs.Settle[i].Stale {
			t.Fatalf("%s: settlement %d (%v of %s) stale: memory %v, %s %v", what, i,
				bm.Settle[i].Outcome, bm.Settle[i].ID, bm.Settle[i].Stale, e.Name, bs.Settle[i].Stale)
		}
	}
	for i := range bm.Append {
		m, s := bm.Append[i], d.ref(bs.Append[i : i+1])[0]
		if (m.Seq == 0) != (s.Seq == 0) || m.Token != s.Token || m.State != s.State || !m.CreatedAt.Equal(s.CreatedAt) {
			t.Fatalf("%s: append %d stamped: memory %s, %s %s", what, i, summary(m), e.Name, summary(s))
		}
		if m.Seq != 0 {
			d.seqs[m.Envelope.ID] = [2]int64{m.Seq, s.Seq}
			if m.Token != 0 {
				d.held = append(d.held, m)
			}
		}
	}
}

// record returns a record to append: new (live, claimed, keyed, dead) or
// one appended before.
func (d *diff) record() stores.Record {
	b := d.next()
	if b&0x80 != 0 && len(d.all) > 0 {
		return d.all[d.pick(len(d.all))]
	}
	p := int(b>>5) & 1
	now := d.e.Time
	r := stores.Record{Session: d.session, Partition: p, Route: d.routes[b>>6&1], Envelope: message.Envelope{
		ID: message.NewID(), Topic: "t", Payload: []byte{b}, Key: []string{"", "a"}[b&1],
		ReceivedAt: now.Add(time.Duration(b%5) * time.Second),
	}, CreatedAt: now.Add(-time.Duration(b%3) * time.Second)}
	switch b >> 1 & 7 {
	case 0, 1:
		r.Token = d.token(p)
	case 2:
		r.CoalesceKey = "c"
	case 3:
		r.CoalesceKey, r.Token = "c", d.token(p)
	case 4:
		r.State, r.DeadReason, r.Raw = stores.Dead, "bad", true
		if b&1 == 0 {
			r.DeadAt = now
		}
	case 5:
		r.Envelope.Headers = map[string]string{"h": string(b)}
		r.CreatedAt, r.ExpiresAt = time.Time{}, now.Add(time.Hour)
	}
	return r
}

// settlement settles a held record or drops a dead letter, and returns
// the record. With of set it settles of again, after prev (a dead letter
// is dropped again): its attempts follow prev's, under prev's token or a
// stale one.
func (d *diff) settlement(of *stores.Record, prev *stores.Settlement) (stores.Settlement, *stores.Record, bool) {
	now := d.e.Time
	o := stores.Outcome(d.pick(4) + 1)
	if of != nil && of.State == stores.Dead {
		o = stores.Drop
	}
	if o == stores.Drop {
		r := of
		if r == nil {
			if len(d.dead) == 0 {
				return stores.Settlement{}, nil, false
			}
			r = &d.dead[d.pick(len(d.dead))]
		}
		return stores.Settlement{Key: r.Key(), Outcome: stores.Drop}, r, true
	}
	r, attempts, token, reason := of, 0, int64(0), "e"
	if r == nil {
		if len(d.held) == 0 {
			return stores.Settlement{}, nil, false
		}
		r = &d.held[d.pick(len(d.held))]
		attempts, token = r.Attempts, r.Token
	} else { // each outcome tells itself apart from the one before
		attempts, token, reason = prev.Attempts, prev.Token, fmt.Sprint("e", prev.Attempts+1)
		now = now.Add(time.Duration(attempts) * time.Second)
	}
	st := stores.Settlement{Key: r.Key(), Token: token, Outcome: o, Attempts: attempts + 1,
		FirstAttemptAt: d.e.Time, NextAttemptAt: now.Add(time.Second), Reason: reason}
	if d.pick(4) == 0 {
		st.Token = d.token(r.Partition)
	}
	if d.pick(2) == 0 {
		st.At = d.e.Time.Add(time.Minute)
	}
	return st, r, true
}

// mine returns the stats of the input's session, as text.
func (d *diff) mine(all []stores.SessionStats) string {
	for _, st := range all {
		if st.Session == d.session {
			return fmt.Sprintf("%+v", st)
		}
	}
	return ""
}

func clone(b stores.Batch) stores.Batch {
	return stores.Batch{Append: slices.Clone(b.Append), Settle: slices.Clone(b.Settle)}
}

func (d *diff) sameRecords(what string, a, b []stores.Record) {
	d.t.Helper()
	if !slices.EqualFunc(a, b, func(m, s stores.Record) bool {
		return summary(m) == summary(s) && d.seqs[m.Envelope.ID] == [2]int64{m.Seq, s.Seq}
	}) {
		d.t.Fatalf("%s: records differ:\nmemory %v\n%s %v", what, summaries(a), d.e.Name, summaries(b))
	}
}

// summary is everything of r but its Seq.
func summary(r stores.Record) string {
	r.Seq = 0
	return fmt.Sprintf("%+v", r)
}

func summaries(rs []stores.Record) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = summary(r)
	}
	return out
}
