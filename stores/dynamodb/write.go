package dynamodb

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/gobridge/gobridge/stores"
)

// op is one settlement or one append of a Write, with what was read for
// it and what the current attempt of its transaction makes of it.
type op struct {
	st    *stores.Settlement
	ki    item           // settlement: the record's key item
	body  item           // dead-lettering settlement: the record item
	rec   *stores.Record // append: the caller's record, stamped on success
	r     stores.Record  // append: as it is written
	pk    string         // append: its partition
	g     *group         // append with a coalesce key
	lease bool           // append: claimed under r.Token while that lease holds
	skip  bool           // not applied: a duplicate append, a stale settlement
	kept  bool           // append: inserted by a failed Write this one retries; r as stored
	// settlement: every settlement of its key in the batch, in order; st
	// is the one whose change the transaction makes, replacing those
	// applied before it (see resolve)
	chain, replaced []*stores.Settlement

	// Set by build for the current attempt.
	absorbed bool  // append: coalesced into a newer unclaimed record
	gone     bool  // append: replaced by a later append of the transaction (only its key is written, a tombstone)
	token    int64 // append: the token it is written with
}

// Write implements stores.Store: it reads what the batch needs (read),
// then commits it chunk by chunk (see Atomicity in the package doc).
func (s *Store) Write(ctx context.Context, b *stores.Batch) error {
	if err := b.Validate(); err != nil {
		return err
	}
	now := s.now()
	ops, err := plan(b, now)
	if err != nil {
		return err
	}
	if err := s.usable(ctx); err != nil {
		return err
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if err := s.read(ctx, ops); err != nil {
		return fmt.Errorf("dynamodb: write: %w", err)
	}
	cs := chunks(ops)
	for i, c := range cs {
		err := s.commit(ctx, c, now)
		if err == nil {
			continue
		}
		done := cs[:i] // committed, and c too perhaps if its answer was lost (commit stamped it then)
		if lost(err) {
			done = cs[:i+1]
		}
		for _, o := range slices.Concat(done...) { // a retry reports what they did (read)
			switch {
			case o.rec != nil && o.rec.Seq != 0:
				s.partial[o.rec.Key()] = o.rec.Seq
			case o.st != nil && !o.st.Stale:
				s.partial[o.st.Key] = 0
			}
		}
		return fmt.Errorf("dynamodb: write: %w", mapErr(err))
	}
	for _, o := range ops {
		for _, st := range o.replaced {
			st.Stale = o.st.Stale
		}
	}
	return nil
}

// plan turns b into ops, dropping duplicate keys within the batch and
// refusing a record DynamoDB could not hold.
func plan(b *stores.Batch, now time.Time) ([]*op, error) {
	var ops []*op
	last := map[stores.Key]*op{}
	for i := range b.Settle {
		// A key settled several times in one batch is one op (one
		// transaction cannot touch an item twice): read decides which
		// apply once it knows the record's token (resolve).
		st := &b.Settle[i]
		if o := last[st.Key]; o != nil {
			o.chain = append(o.chain, st)
			continue
		}
		last[st.Key] = &op{st: st, chain: []*stores.Settlement{st}}
		ops = append(ops, last[st.Key])
	}
	seen, groups := map[stores.Key]bool{}, map[string]*group{}
	for i := range b.Append {
		rec := &b.Append[i]
		if rec.Partition >= maxParts {
			return nil, fmt.Errorf("%w: partition %d: DynamoDB outboxes have at most %d", stores.ErrInvalid, rec.Partition, maxParts)
		}
		o := &op{rec: rec, r: *rec, pk: partPK(rec.Session, rec.Partition), skip: seen[rec.Key()]}
		seen[rec.Key()] = true
		if o.r.Stamp(now); o.r.State == stores.Live {
			o.lease = o.r.Token != 0
			if o.r.CoalesceKey != "" {
				gk := ptrPK(o.r.Session, o.r.Route, o.r.CoalesceKey)
				if groups[gk] == nil {
					groups[gk] = &group{pk: gk, session: o.r.Session, route: o.r.Route}
				}
				o.g = groups[gk]
			}
		}
		o.r.Token = max(o.r.Token, 0)
		if n := recordSize(&o.r); n > maxItemBytes {
			return nil, fmt.Errorf("%w: record %.100s is about %d bytes, over DynamoDB's item limit (%d with its bookkeeping)",
				stores.ErrInvalid, rec.Envelope.ID, n, maxItemBytes)
		}
		ops = append(ops, o)
	}
	return ops, nil
}

// read fetches what ops need and marks what is already known to be
// stale, a duplicate, or inserted by a failed Write this one retries.
func (s *Store) read(ctx context.Context, ops []*op) error {
	var keys []item
	for _, o := range ops {
		switch {
		case o.st != nil:
			keys = append(keys, keyOf(o.st.Key))
		case s.retried(o):
			keys = append(keys, key(o.at()))
		}
		if o.g != nil {
			keys = append(keys, key(o.g.pk, ptrSK)) // (getItems reads a key once)
		}
	}
	items, err := s.getItems(ctx, keys)
	if err != nil {
		return err
	}
	settled := map[string]*op{}
	var dead []*op // dead-lettering settlements (their records are copied) and chains of live records
	var bodies []item
	for _, o := range ops { // settlements first, as plan orders them
		if o.st != nil {
			id := itemID(keyOf(o.st.Key))
			o.ki, settled[id] = items[id], o
			s.learn(o.ki)
			if len(o.chain) > 1 { // which apply depends on the record's token
				if getS(o.ki, "state") == string(stores.Live) {
					dead, bodies = append(dead, o), append(bodies, loc(o.ki))
				} else {
					seq, ok := s.partial[o.st.Key]
					o.resolve(ok && seq == 0)
				}
				continue
			}
			want := stores.Live
			if o.st.Outcome == stores.Drop {
				want = stores.Dead
			}
			if state := getS(o.ki, "state"); state != string(want) {
				// Stale, unless it is the state a failed Write this one
				// retries may have made (see Atomicity in the package doc).
				seq, ok := s.partial[o.st.Key]
				o.st.Stale, o.skip = !ok || seq != 0 || state != leaves[o.st.Outcome], true
			} else if o.st.Outcome == stores.DeadLetter {
				dead, bodies = append(dead, o), append(bodies, loc(o.ki))
			}
			continue
		}
		if s.retried(o) {
			// Still where the failed Write put it: report it as stored.
			it := items[itemID(key(o.at()))]
			if it != nil && getS(it, "id") == o.r.Envelope.ID && getS(it, "session") == o.r.Session && getS(it, "route") == o.r.Route {
				o.skip, o.kept, o.r.Token = true, true, getN(it, "token")
			}
		}
		// Appending a key this batch also settles: present unless the
		// settlement found nothing.
		if so := settled[itemID(keyOf(o.rec.Key()))]; so != nil && so.ki != nil {
			o.skip, o.kept = true, false
		}
		if o.g != nil && o.g.ptr == nil && !o.g.ignore {
			o.g.ptr = items[itemID(key(o.g.pk, ptrSK))]
			s.learn(o.g.ptr)
			// The record it names is being settled: claimed, so not a
			// coalescing candidate (and one item cannot appear twice
			// in a transaction).
			if o.g.ptr != nil && settled[itemID(keyOf(o.g.key(getS(o.g.ptr, "id"))))] != nil {
				o.g.ignore = true
			}
		}
	}
	got, err := s.getItems(ctx, bodies)
	if err != nil {
		return err
	}
	for _, o := range dead {
		if o.body = got[itemID(loc(o.ki))]; len(o.chain) > 1 {
			o.resolve(false)
		} else if o.body == nil || getN(o.body, "token") != o.st.Token {
			o.st.Stale, o.skip = true, true
		}
	}
	return nil
}

// resolve decides which settlements of o's chain apply, in order, as each
// would on its own on the record as read (its key item, and its body when
// live), and makes o the change of the last one: it replaces the Retries
// applied before it (a DeadLetter keeps the last one's NextAttemptAt), and
// a DeadLetter then a Drop leave the record gone, as a Done does. When
// none applies but a failed Write this one retries settled the key
// (retried), the last settlement and the Retries of its token before it
// are reported applied if the record is in the state it leaves.
func (o *op) resolve(retried bool) {
	state, token := getS(o.ki, "state"), getN(o.body, "token")
	var applied []*stores.Settlement
	for _, st := range o.chain {
		ok := state == string(stores.Dead) && st.Outcome == stores.Drop ||
			state == string(stores.Live) && o.body != nil && st.Outcome != stores.Drop && st.Token == token
		if st.Stale = !ok; ok {
			applied, state = append(applied, st), leaves[st.Outcome]
		}
	}
	if len(applied) == 0 && retried && state == leaves[o.chain[len(o.chain)-1].Outcome] {
		for _, st := range o.chain {
			if last := o.chain[len(o.chain)-1]; st == last || st.Outcome == stores.Retry && st.Token == last.Token {
				applied, st.Stale = append(applied, st), false
			}
		}
		o.skip = true
	}
	if len(applied) == 0 {
		o.skip = true
		return
	}
	o.st, o.replaced = applied[len(applied)-1], applied[:len(applied)-1]
	if n := len(applied); n > 1 && o.st.Outcome == stores.Drop {
		o.st = &stores.Settlement{Key: o.st.Key, Token: applied[n-2].Token, Outcome: stores.Done}
		o.replaced = applied
	}
}

// leaves is the state each outcome leaves a record's key item in.
var leaves = map[stores.Outcome]string{stores.Done: "done", stores.Retry: string(stores.Live),
	stores.DeadLetter: string(stores.Dead), stores.Drop: "done"}

// retried reports whether o appends again, at the Seq stamped on it, a
// record that a failed Write inserted or may have (see Atomicity in the
// package doc).
func (s *Store) retried(o *op) bool {
	return len(s.partial) > 0 && o.rec != nil && o.r.Seq != 0 && !o.skip && s.partial[o.rec.Key()] == o.r.Seq
}

// learn raises this process's counter of a partition to the Seq of a
// record it has read the place of (in a key item or coalesce pointer):
// the counter it had may be behind, and a new record must not be planned
// on an item the same transaction settles or replaces (DynamoDB refuses
// two operations on one item).
func (s *Store) learn(it item) {
	pk := getS(it, "loc_pk")
	if seq, err := strconv.ParseInt(getS(it, "loc_sk"), 10, 64); err == nil && strings.HasPrefix(pk, "p#") {
		s.seqs[pk] = max(s.seqs[pk], seq>>partBits)
	}
}

// chunks splits ops into transactions of at most 100 items and about
// 3.5 MB, counting each op and each item it shares with others at its
// most.
func chunks(ops []*op) [][]*op {
	var out [][]*op
	items, bytes, shared := 0, 0, map[string]bool{}
	for _, o := range ops {
		n, size := o.weight(shared)
		if len(out) == 0 || items+n > 100 || bytes+size > 3_500_000 {
			shared = map[string]bool{}
			n, size = o.weight(shared)
			out, items, bytes = append(out, nil), 0, 0
		}
		out[len(out)-1] = append(out[len(out)-1], o)
		items, bytes = items+n, bytes+size
	}
	return out
}

// weight returns the most items and bytes o adds to a transaction that
// already has the shared items in shared (partition counter and lease
// check, stats item, a coalesce pointer and the record it replaces), and
// adds its own to shared.
func (o *op) weight(shared map[string]bool) (items, size int) {
	add := func(id string, n int) {
		if !shared[id] {
			shared[id], items = true, items+n
		}
	}
	if o.st != nil {
		add("s "+o.st.Session, 1)
		if o.body != nil {
			size = int(getN(o.ki, "size")) + 2*maxReason
		}
		return items + map[stores.Outcome]int{stores.Done: 2, stores.Retry: 1, stores.DeadLetter: 3, stores.Drop: 2}[o.st.Outcome], size + 1024
	}
	add("p "+o.pk, 2)
	add("s "+o.r.Session, 1)
	if o.g != nil {
		add("g "+o.g.pk, 3)
	}
	return items + 2, recordSize(&o.r)
}

// commit applies one chunk. After a cancellation that conditions caused it
// plans the chunk again, as each failed item's replan says: duplicates are
// skipped, stale settlements marked, a partition counter or coalesce
// pointer another process moved taken as reported, appends whose lease is
// not current written unclaimed.
func (s *Store) commit(ctx context.Context, c []*op, now time.Time) error {
	for attempt := 0; ; attempt++ {
		t := s.build(c, now)
		var err error
		if len(t.items) > 0 {
			err = s.transact(ctx, t.items)
		}
		if err == nil || lost(err) {
			s.finish(c, t) // (if lost, a retry of the batch finds out: see read)
			return err
		}
		rs := reasons(err)
		if len(rs) != len(t.items) || attempt == maxAttempts {
			return err
		}
		fixed := false
		for i, r := range rs {
			if aws.ToString(r.Code) == codeCondition && t.replan[i] != nil {
				t.replan[i](r.Item)
				fixed = true
			}
		}
		if !fixed {
			return err
		}
		if t.busy && attempt > 0 {
			// Several processes keep appending to one partition (or one
			// coalesce key): spread them out.
			if berr := backoff(ctx, attempt); berr != nil {
				return errors.Join(err, berr) // refused, not lost
			}
		}
	}
}

// finish stamps what the committed chunk did on the caller's records and
// remembers the partition counters and pointers.
func (s *Store) finish(c []*op, t *txn) {
	for _, o := range c {
		if o.st != nil {
			delete(s.partial, o.st.Key)
			continue
		}
		delete(s.partial, o.rec.Key())
		switch {
		case o.kept:
			*o.rec = o.r
		case o.skip || o.absorbed:
			o.rec.Seq, o.rec.Token = 0, 0
		default:
			*o.rec = o.r
			o.rec.Token = o.token
		}
	}
	for _, f := range t.after {
		f()
	}
}
