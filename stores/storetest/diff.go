package storetest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/gobridge/gobridge/stores"
)

// DiffEnv is what Diff compares: a store under test and the reference
// (a memory store), both reading their clock from Now, which Diff moves.
// The inputs of one fuzzing process share one DiffEnv (opening a store
// costs more than running an input); each input has a session and routes
// of its own.
//
// The times Diff gives the stores carry no monotonic reading, so the
// memory store, which compares receive times in coalescing by Go's
// monotonic reading when both have one, and DynamoDB, which compares
// wall-clock nanoseconds, agree (they differ only when the wall clock is
// stepped within one Write, which Diff does not do).
type DiffEnv struct {
	// Name names the store under test in failure messages.
	Name string
	// Store is the store under test; Ref the reference.
	Store, Ref stores.Store
	// Time is the clock both stores read (Now): whole milliseconds, UTC,
	// without a monotonic reading.
	Time time.Time
	// Reopen closes Store and returns it opened again; nil: inputs do not
	// reopen.
	Reopen func(t *testing.T) stores.Store
	// ReopenReleasesLeases: see Features.
	ReopenReleasesLeases bool
	// Sparse is set for a store whose Seqs follow append order only within
	// a partition and whose Seqs and fencing tokens are not dense
	// (DynamoDB: a Seq counter per partition that follows the clock, one
	// token counter per table that every Acquire moves, a refused one too),
	// as the contract allows. Diff then maps the reference's tokens to the
	// store's (which must grow with them), takes a Claim's After only from
	// a record of the claimed partition, and compares dead letters whose
	// DeadAt ties across partitions in the reference's order.
	Sparse bool
	// Prefix is put before the sessions' and routes' names, so that
	// inputs of processes sharing one table do not meet.
	Prefix string
	// Inputs counts the inputs run so far.
	Inputs int
}

// Now is the stores' clock.
func (e *DiffEnv) Now() time.Time { return e.Time }

// DiffSeeds are the seed inputs of the differential fuzz targets.
var DiffSeeds = [][]byte{
	{0, 3, 2, 2, 6, 3, 0, 4, 1, 2, 3, 5, 0, 7},
	{0, 4, 0, 4, 2, 4, 4, 0, 6, 6, 2, 4, 3, 1, 5, 2, 7, 8, 9, 1, 2, 3},
	{5, 0, 1, 0, 1, 0, 1, 2, 1, 6, 9, 2, 3, 1, 3, 4, 7, 10, 2, 1, 1, 3, 3, 3},
	{5, 1, 0, 0x13, 0x12, 0x11, 0x10, 2, 0, 3, 1, 9, 6, 3, 0, 8, 2, 0, 0},
	// Lease, a claimed append, a Write settling it twice under its token
	// (Retry, then Done), a new owner's claim, stats.
	{3, 0, 0, 0, 0, 1, 0, 2, 0, 0, 0, 0x82, 1, 0, 1, 1, 0, 1, 1, 5, 3, 3, 0, 1, 0, 2, 0, 2, 3, 1, 6},
	// The same with Retry, Retry, DeadLetter, then the dead letters.
	{3, 0, 0, 0, 0, 1, 0, 2, 0, 0, 0, 0x83, 1, 0, 1, 1, 1, 1, 1, 2, 1, 1, 8, 2, 0, 1, 6},
	// Retry then Done, and the record appended again in the same Write.
	{3, 0, 0, 0, 0, 1, 0, 2, 0, 0, 0, 0xc2, 1, 0, 1, 1, 0, 1, 1, 5, 3, 3, 0, 1, 0, 2, 0, 2, 3, 1, 6},
	// Done then Retry (stale), then a claim.
	{3, 0, 0, 0, 0, 1, 0, 2, 0, 0, 0, 0x82, 0, 0, 1, 1, 1, 1, 1, 5, 3, 3, 0, 1, 0, 2, 0, 2, 3, 1, 6},
}

// Diff drives e.Store and e.Ref through the random operations ops
// describe (at most 300 bytes are read) and fails on the first answer that
// differs: Writes of appends (claimed under current or stale tokens,
// coalesce and ordering keys, dead letters, re-appends of any earlier
// record) and settlements (Done, Retry, DeadLetter, Drop, under current or
// stale tokens, a record settled several times in one Write, settled and
// appended again in one Write), claims, lease changes, reopens, stats and
// dead-letter pages. Seqs are compared by what they name, not by value.
func Diff(t *testing.T, e *DiffEnv, ops []byte) {
	t.Helper()
	if len(ops) > 300 {
		ops = ops[:300]
	}
	e.Inputs++
	u := fmt.Sprint(e.Prefix, e.Inputs)
	d := &diff{t: t, e: e, session: "s" + u, routes: []string{"r0-" + u, "r1-" + u},
		leases: map[int]stores.Lease{}, seqs: map[string][2]int64{}, ops: ops,
		tokens: map[int64]int64{}, back: map[int64]int64{}}
	for step := 0; len(d.ops) > 0; step++ {
		d.step(step)
	}
}

// diff is one input's run: its session and routes, and what the stores
// handed out.
type diff struct {
	t         *testing.T
	e         *DiffEnv
	session   string
	routes    []string
	all       []stores.Record // every record offered to Write, for re-appends
	held      []stores.Record // claimed records (as the reference returned them)
	dead      []stores.Record // dead letters seen
	leases    map[int]stores.Lease
	oldTokens []int64
	seqs      map[string][2]int64 // envelope ID -> Seq in the reference, in the store
	tokens    map[int64]int64     // the reference's token -> the store's
	back      map[int64]int64     // the store's token -> the reference's
	ops       []byte
}

func (d *diff) next() byte {
	if len(d.ops) == 0 {
		return 0
	}
	b := d.ops[0]
	d.ops = d.ops[1:]
	return b
}

func (d *diff) pick(n int) int { return int(d.next()) % n }

func (d *diff) fail(what, format string, ref, sut any) {
	d.t.Helper()
	d.t.Fatalf("%s: "+format, what, "memory", ref, d.e.Name, sut)
}

func (d *diff) same(what string, a, b error) {
	d.t.Helper()
	for _, target := range []error{stores.ErrInvalid, stores.ErrLeaseLost, stores.ErrLeaseHeld, stores.ErrNotFound} {
		if errors.Is(a, target) != errors.Is(b, target) {
			d.fail(what, "%s %v, %s %v", a, b)
		}
	}
	if (a == nil) != (b == nil) {
		d.fail(what, "%s %v, %s %v", a, b)
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

// sut returns the store's token for the reference's token tok.
func (d *diff) sut(tok int64) int64 {
	if n, ok := d.tokens[tok]; ok {
		return n
	}
	return tok
}

// refToken returns the reference's token for the store's token tok.
func (d *diff) refToken(tok int64) int64 {
	if n, ok := d.back[tok]; ok {
		return n
	}
	return tok
}

// ref returns rs with the store's tokens mapped to the reference's.
func (d *diff) ref(rs []stores.Record) []stores.Record {
	rs = slices.Clone(rs)
	for i := range rs {
		rs[i].Token = d.refToken(rs[i].Token)
	}
	return rs
}

func (d *diff) step(step int) {
	t, e := d.t, d.e
	ctx := t.Context()
	op := d.next() % 11
	what := fmt.Sprintf("step %d op %d", step, op)
	switch op {
	case 0, 1: // a Write
		d.write(what)
	case 2: // claim
		p := d.pick(2)
		req := stores.ClaimRequest{Session: d.session, Partition: p, Token: d.token(p), Limit: d.pick(4) + 1}
		rm, rs := req, req
		rs.Token = d.sut(req.Token)
		if len(d.all) > 0 && d.pick(2) == 0 { // after a record's Seq, in each store
			r := d.all[d.pick(len(d.all))]
			if seq := d.seqs[r.Envelope.ID]; !e.Sparse || r.Partition == p {
				rm.After, rs.After = seq[0], seq[1]
			}
		}
		a, errA := e.Ref.Claim(ctx, rm)
		b, errB := e.Store.Claim(ctx, rs)
		d.same(what, errA, errB)
		d.sameRecords(what, a, d.ref(b))
		d.held = append(d.held, a...)
	case 3: // acquire a partition lease, by the holder or another owner later
		p := d.pick(2)
		owner := fmt.Sprint("o", d.pick(2))
		ttl := time.Duration(d.pick(3)+1) * time.Second
		if old, ok := d.leases[p]; ok {
			d.oldTokens = append(d.oldTokens, old.Token)
		}
		a, errA := e.Ref.Acquire(ctx, stores.PartitionLease(d.session, p), owner, ttl, e.Time)
		b, errB := e.Store.Acquire(ctx, stores.PartitionLease(d.session, p), owner, ttl, e.Time)
		d.same(what, errA, errB)
		if errA == nil && e.Sparse && (len(d.back) == 0 || b.Token > slices.Max(slices.Collect(maps.Keys(d.back)))) {
			d.tokens[a.Token], d.back[b.Token] = b.Token, a.Token
		}
		if bt := b; func() bool { bt.Token = d.refToken(b.Token); return bt != a }() {
			d.fail(what, "lease %s %+v, %s %+v", a, b)
		}
		if errA == nil {
			d.leases[p] = a
		}
	case 4: // release a partition lease
		p := d.pick(2)
		if le, ok := d.leases[p]; ok {
			ls := le
			ls.Token = d.sut(le.Token)
			d.same(what, e.Ref.Release(ctx, le), e.Store.Release(ctx, ls))
			d.oldTokens = append(d.oldTokens, le.Token)
			delete(d.leases, p)
		}
	case 5: // the clock moves
		e.Time = e.Time.Add(time.Duration(d.pick(4)) * 500 * time.Millisecond)
	case 6, 7: // stats
		a, errA := e.Ref.Stats(ctx)
		b, errB := e.Store.Stats(ctx)
		d.same(what, errA, errB)
		if a, b := d.mine(a), d.mine(b); a != b {
			d.fail(what, "stats\n%s %+v\n%s %+v", a, b)
		}
	case 8: // dead letters, by route or ID, in pages
		q := stores.DeadQuery{Limit: d.pick(3) + 1, Route: d.routes[d.pick(2)]}
		if d.pick(2) == 0 && len(d.all) > 0 {
			q.ID, q.Route = d.all[d.pick(len(d.all))].Envelope.ID, ""
		}
		d.deadPages(what, q)
	case 9: // reopen
		if e.Reopen == nil {
			return
		}
		e.Store = e.Reopen(t)
		if !e.ReopenReleasesLeases {
			return
		}
		for p, le := range d.leases { // the reference releases them too
			if err := e.Ref.Release(ctx, le); err != nil {
				t.Fatal(err)
			}
			d.oldTokens = append(d.oldTokens, le.Token)
			delete(d.leases, p)
		}
	case 10: // leases listed
		a, errA := e.Ref.List(ctx, "outbox/"+d.session+"/", e.Time)
		b, errB := e.Store.List(ctx, "outbox/"+d.session+"/", e.Time)
		d.same(what, errA, errB)
		for i := range b {
			b[i].Token = d.refToken(b[i].Token)
		}
		if !slices.Equal(a, b) {
			d.fail(what, "leases %s %+v, %s %+v", a, b)
		}
	}
}

// deadPages lists q page by page in both stores, in lockstep. Where Seqs
// order records only within a partition, Seqs and cursors differ in value
// and dead letters whose DeadAt ties across partitions in order: each store
// is paged on its own, the store's list must be in its own order, and the
// lists are compared in the reference's.
func (d *diff) deadPages(what string, q stores.DeadQuery) {
	ctx, e := d.t.Context(), d.e
	if !e.Sparse {
		for page := 0; page < 50; page++ {
			a, na, errA := e.Ref.Dead(ctx, q)
			b, nb, errB := e.Store.Dead(ctx, q)
			d.same(what, errA, errB)
			d.sameRecords(what, a, b)
			d.dead = append(d.dead, a...)
			if na != nb {
				d.fail(what, "next cursor %s %q, %s %q", na, nb)
			}
			if q.After = na; na == "" {
				break
			}
		}
		return
	}
	a, pa, errA := deadList(ctx, e.Ref, q)
	b, pb, errB := deadList(ctx, e.Store, q)
	d.same(what, errA, errB)
	if !slices.Equal(pa, pb) {
		d.fail(what, "page sizes %s %v, %s %v", pa, pb)
	}
	if !slices.IsSortedFunc(b, func(x, y stores.Record) int { return cmp.Or(x.DeadAt.Compare(y.DeadAt), cmp.Compare(x.Seq, y.Seq)) }) {
		d.t.Fatalf("%s: %s dead letters not by DeadAt, then Seq: %v", what, e.Name, summaries(b))
	}
	ref := func(r stores.Record) int64 { return d.seqs[r.Envelope.ID][0] }
	slices.SortStableFunc(b, func(x, y stores.Record) int { return cmp.Or(x.DeadAt.Compare(y.DeadAt), cmp.Compare(ref(x), ref(y))) })
	d.sameRecords(what, a, b)
	d.dead = append(d.dead, a...)
}

// deadList returns every page of q (at most 50), and the pages' sizes.
func deadList(ctx context.Context, s stores.Store, q stores.DeadQuery) ([]stores.Record, []int, error) {
	var all []stores.Record
	var sizes []int
	for page := 0; page < 50; page++ {
		got, next, err := s.Dead(ctx, q)
		if err != nil {
			return all, sizes, err
		}
		all, sizes = append(all, got...), append(sizes, len(got))
		if q.After = next; next == "" {
			break
		}
	}
	return all, sizes, nil
}
