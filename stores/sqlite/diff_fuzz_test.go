package sqlite_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/gobridge/gobridge/message"
	"github.com/gobridge/gobridge/stores"
	"github.com/gobridge/gobridge/stores/memory"
	"github.com/gobridge/gobridge/stores/sqlite"
)

// FuzzStore_MatchesMemory drives the SQLite store and the memory store (the
// reference) through the same random operations and fails on the first
// answer that differs: Writes of appends (claimed under current or stale
// tokens, coalesce and ordering keys, dead letters, re-appends of any
// earlier record) and settlements (Done, Retry, DeadLetter, Drop, under
// current or stale tokens), claims, lease changes, reopens, stats and
// dead-letter pages. Seqs are compared by order, not value.
//
// The inputs a fuzzing process runs share the two stores (a fresh pair
// every 500 inputs), each input with a session and routes of its own:
// opening a SQLite file costs more than running an input.
func FuzzStore_MatchesMemory(f *testing.F) {
	f.Add([]byte{0, 3, 2, 2, 6, 3, 0, 4, 1, 2, 3, 5, 0, 7})
	f.Add([]byte{0, 4, 0, 4, 2, 4, 4, 0, 6, 6, 2, 4, 3, 1, 5, 2, 7, 8, 9, 1, 2, 3})
	f.Add([]byte{5, 0, 1, 0, 1, 0, 1, 2, 1, 6, 9, 2, 3, 1, 3, 4, 7, 10, 2, 1, 1, 3, 3, 3})
	f.Add([]byte{5, 1, 0, 0x13, 0x12, 0x11, 0x10, 2, 0, 3, 1, 9, 6, 3, 0, 8, 2, 0, 0})
	f.Fuzz(func(t *testing.T, ops []byte) {
		if len(ops) > 300 {
			ops = ops[:300]
		}
		d := newDiff(t)
		for step := 0; len(ops) > 0; step++ {
			d.step(step, &ops)
		}
	})
}

// shared are the stores the inputs of one fuzzing process share, and their
// clock.
var shared struct {
	dir, path string
	inputs    int
	sq        *sqlite.Store
	mem       *memory.Store
	now       time.Time
}

// TestMain removes the directory of the shared stores.
func TestMain(m *testing.M) {
	code := m.Run()
	if shared.sq != nil {
		_ = shared.sq.Close()
		_ = os.RemoveAll(shared.dir)
	}
	os.Exit(code)
}

// diff is one input's run: its session and routes, and what the stores
// handed out.
type diff struct {
	t         *testing.T
	session   string
	routes    []string
	all       []stores.Record // every record offered to Write, for re-appends
	held      []stores.Record // claimed records (as the memory store returned them)
	dead      []stores.Record // dead letters seen
	leases    map[int]stores.Lease
	oldTokens []int64
	seqs      map[string][2]int64 // envelope ID -> Seq in memory, in SQLite
	ops       *[]byte
}

func newDiff(t *testing.T) *diff {
	if shared.inputs%500 == 0 {
		if shared.dir == "" {
			dir, err := os.MkdirTemp("", "gobridge-fuzz-")
			if err != nil {
				t.Fatal(err)
			}
			shared.dir = dir
		}
		if shared.sq != nil {
			_ = shared.sq.Close()
			_ = os.Remove(shared.path)
		}
		shared.path = filepath.Join(shared.dir, fmt.Sprint(shared.inputs, ".db"))
		shared.now = time.Unix(1_700_000_000, 0).UTC()
		shared.mem = memory.New(memory.Options{Now: func() time.Time { return shared.now }})
		shared.sq = nil
		reopenShared(t)
	}
	shared.inputs++
	u := fmt.Sprint(shared.inputs)
	return &diff{t: t, session: "s" + u, routes: []string{"r0-" + u, "r1-" + u},
		leases: map[int]stores.Lease{}, seqs: map[string][2]int64{}}
}

func reopenShared(t *testing.T) {
	if shared.sq != nil {
		if err := shared.sq.Close(); err != nil {
			t.Fatal(err)
		}
	}
	s, err := sqlite.Open(shared.path, sqlite.Options{Sync: "normal", Now: func() time.Time { return shared.now }})
	if err != nil {
		t.Fatal(err)
	}
	shared.sq = s
}

func (d *diff) next() byte {
	if len(*d.ops) == 0 {
		return 0
	}
	b := (*d.ops)[0]
	*d.ops = (*d.ops)[1:]
	return b
}

func (d *diff) pick(n int) int { return int(d.next()) % n }

func (d *diff) same(what string, a, b error) {
	d.t.Helper()
	for _, target := range []error{stores.ErrInvalid, stores.ErrLeaseLost, stores.ErrLeaseHeld, stores.ErrNotFound} {
		if errors.Is(a, target) != errors.Is(b, target) {
			d.t.Fatalf("%s: memory %v, sqlite %v", what, a, b)
		}
	}
	if (a == nil) != (b == nil) {
		d.t.Fatalf("%s: memory %v, sqlite %v", what, a, b)
	}
}

// token returns the current token of partition p, or a stale or unknown
// one.
func (d *diff) token(p int) int64 {
	switch d.pick(4) {
	case 0:
		if len(d.oldTokens) > 0 {
			return d.oldTokens[d.pick(len(d.oldTokens))]
		}
	case 1:
		return -1 // never issued
	}
	return d.leases[p].Token
}

func (d *diff) step(step int, ops *[]byte) {
	t, mem, sq := d.t, shared.mem, shared.sq
	d.ops = ops
	ctx := t.Context()
	op := d.next() % 11
	what := fmt.Sprintf("step %d op %d", step, op)
	switch op {
	case 0, 1: // a Write of 0-3 appends and 0-3 settlements
		var b stores.Batch
		for range d.pick(4) {
			b.Append = append(b.Append, d.record())
		}
		for range d.pick(4) {
			if st, ok := d.settlement(); ok {
				b.Settle = append(b.Settle, st)
			}
		}
		d.all = append(d.all, b.Append...)
		bm, bs := clone(b), clone(b)
		d.same(what, mem.Write(ctx, &bm), sq.Write(ctx, &bs))
		for i := range bm.Settle {
			if bm.Settle[i].Stale != bs.Settle[i].Stale {
				t.Fatalf("%s: settlement %d (%v of %s) stale: memory %v, sqlite %v", what, i,
					bm.Settle[i].Outcome, bm.Settle[i].ID, bm.Settle[i].Stale, bs.Settle[i].Stale)
			}
		}
		for i := range bm.Append {
			m, s := bm.Append[i], bs.Append[i]
			if (m.Seq == 0) != (s.Seq == 0) || m.Token != s.Token || m.State != s.State || !m.CreatedAt.Equal(s.CreatedAt) {
				t.Fatalf("%s: append %d stamped: memory %s, sqlite %s", what, i, summary(m), summary(s))
			}
			if m.Seq != 0 {
				d.seqs[m.Envelope.ID] = [2]int64{m.Seq, s.Seq}
				if m.Token != 0 {
					d.held = append(d.held, m)
				}
			}
		}
	case 2: // claim
		p := d.pick(2)
		req := stores.ClaimRequest{Session: d.session, Partition: p, Token: d.token(p), Limit: d.pick(4) + 1}
		rm, rs := req, req
		if len(d.all) > 0 && d.pick(2) == 0 { // after a record's Seq, in each store
			seq := d.seqs[d.all[d.pick(len(d.all))].Envelope.ID]
			rm.After, rs.After = seq[0], seq[1]
		}
		a, errA := mem.Claim(ctx, rm)
		b, errB := sq.Claim(ctx, rs)
		d.same(what, errA, errB)
		d.sameRecords(what, a, b)
		d.held = append(d.held, a...)
	case 3: // acquire a partition lease, by the holder or another owner later
		p := d.pick(2)
		owner := fmt.Sprint("o", d.pick(2))
		ttl := time.Duration(d.pick(3)+1) * time.Second
		if old, ok := d.leases[p]; ok {
			d.oldTokens = append(d.oldTokens, old.Token)
		}
		a, errA := mem.Acquire(ctx, stores.PartitionLease(d.session, p), owner, ttl, shared.now)
		b, errB := sq.Acquire(ctx, stores.PartitionLease(d.session, p), owner, ttl, shared.now)
		d.same(what, errA, errB)
		if a != b {
			t.Fatalf("%s: lease memory %+v, sqlite %+v", what, a, b)
		}
		if errA == nil {
			d.leases[p] = a
		}
	case 4: // release a partition lease
		p := d.pick(2)
		if le, ok := d.leases[p]; ok {
			d.same(what, mem.Release(ctx, le), sq.Release(ctx, le))
			d.oldTokens = append(d.oldTokens, le.Token)
			delete(d.leases, p)
		}
	case 5: // the clock moves
		shared.now = shared.now.Add(time.Duration(d.pick(4)) * 500 * time.Millisecond)
	case 6, 7: // stats
		a, errA := mem.Stats(ctx)
		b, errB := sq.Stats(ctx)
		d.same(what, errA, errB)
		if a, b := d.mine(a), d.mine(b); a != b {
			t.Fatalf("%s: stats\nmemory %+v\nsqlite %+v", what, a, b)
		}
	case 8: // dead letters, by route or ID, in pages
		q := stores.DeadQuery{Limit: d.pick(3) + 1, Route: d.routes[d.pick(2)]}
		if d.pick(2) == 0 && len(d.all) > 0 {
			q.ID, q.Route = d.all[d.pick(len(d.all))].Envelope.ID, ""
		}
		for page := 0; page < 50; page++ {
			a, na, errA := mem.Dead(ctx, q)
			b, nb, errB := sq.Dead(ctx, q)
			d.same(what, errA, errB)
			d.sameRecords(what, a, b)
			d.dead = append(d.dead, a...)
			if na != nb {
				t.Fatalf("%s: next cursor memory %q, sqlite %q", what, na, nb)
			}
			if q.After = na; na == "" {
				break
			}
		}
	case 9: // reopen: SQLite ends every lease, so the memory store releases them too
		reopenShared(t)
		for p, le := range d.leases {
			if err := mem.Release(ctx, le); err != nil {
				t.Fatal(err)
			}
			d.oldTokens = append(d.oldTokens, le.Token)
			delete(d.leases, p)
		}
	case 10: // leases listed
		a, errA := mem.List(ctx, "outbox/"+d.session+"/", shared.now)
		b, errB := sq.List(ctx, "outbox/"+d.session+"/", shared.now)
		d.same(what, errA, errB)
		if !slices.Equal(a, b) {
			t.Fatalf("%s: leases memory %+v, sqlite %+v", what, a, b)
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
	now := shared.now
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

// settlement settles a held record or drops a dead letter.
func (d *diff) settlement() (stores.Settlement, bool) {
	o := stores.Outcome(d.pick(4) + 1)
	if o == stores.Drop {
		if len(d.dead) == 0 {
			return stores.Settlement{}, false
		}
		return stores.Settlement{Key: d.dead[d.pick(len(d.dead))].Key(), Outcome: stores.Drop}, true
	}
	if len(d.held) == 0 {
		return stores.Settlement{}, false
	}
	r := d.held[d.pick(len(d.held))]
	st := stores.Settlement{Key: r.Key(), Token: r.Token, Outcome: o, Attempts: r.Attempts + 1,
		FirstAttemptAt: shared.now, NextAttemptAt: shared.now.Add(time.Second), Reason: "e"}
	if d.pick(4) == 0 {
		st.Token = d.token(r.Partition)
	}
	if d.pick(2) == 0 {
		st.At = shared.now.Add(time.Minute)
	}
	return st, true
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
		d.t.Fatalf("%s: records differ:\nmemory %v\nsqlite %v", what, summaries(a), summaries(b))
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
