package sqlite

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gobridge/gobridge/stores"
)

// compactStep is how many tombstones beyond DoneRetention one Write
// deletes on top of those it made, so that the excess shrinks whatever the
// Writes settle.
const compactStep = 4096

// chunks are the row counts of the multi-row statements, largest first: a
// run of rows takes as many of the largest as fit, then the next, so that
// each statement shape is prepared once and its fixed cost is paid once per
// up to 64 rows.
var chunks = []int{64, 16, 4, 1}

// The statements of Write. Arguments ?2 to ?4 of byKey are a record's key;
// tombstone turns a record into a tombstone of the Write ?1.
const (
	byKey      = `id=?2 AND route=?3 AND session=?4`
	tombstone  = `state=2, tomb=?1, token=0, topic='', payload=NULL, headers=NULL, last_error='', dead_reason=''`
	dropQuery  = `UPDATE outbox SET ` + tombstone + ` WHERE ` + byKey + ` AND state=1`
	retryQuery = `UPDATE outbox SET attempts=?1, first_at=?5, next_at=?6, last_error=?7
		WHERE ` + byKey + ` AND state=0 AND token=?8`
	deadLetterQuery = `UPDATE outbox SET state=1, token=0, attempts=?1, first_at=?5, last_error=?6, dead_reason=?6,
		dead_at=?7 WHERE ` + byKey + ` AND state=0 AND token=?8 RETURNING size`
	// absorbQuery finds a reason not to append a record (key ?2 to ?4)
	// with coalesce key ?5 received at ?6: its key is present, or an
	// unclaimed record of its coalesce key received later (but not after
	// now, ?7: see stores.Supersedes) waits.
	absorbQuery = `SELECT 1 FROM outbox WHERE ` + byKey + ` UNION ALL SELECT 1 FROM outbox WHERE ` + byCoalesce +
		` AND received_at>?6 AND received_at<=?7`
	// replaceQuery makes tombstones of the unclaimed records of a coalesce key.
	replaceQuery = `UPDATE outbox SET ` + tombstone + ` WHERE ` + byCoalesce + ` RETURNING size`
	byCoalesce   = `session=?4 AND route=?3 AND ckey=?5 AND state=0 AND token=0 AND ckey<>''`
	leaseQuery   = `SELECT token FROM lease WHERE name = ?`
	countsQuery  = `INSERT INTO counts VALUES (?, ?, ?, ?, ?) ON CONFLICT DO UPDATE
		SET live=live+excluded.live, dead=dead+excluded.dead, bytes=bytes+excluded.bytes`
	compactQuery = `DELETE FROM outbox WHERE seq IN (SELECT seq FROM outbox WHERE state=2 ORDER BY tomb LIMIT ?)`
)

// doneQuery settles n Done settlements (id, route, session, token) of the
// Write ?1.
func doneQuery(n int) string {
	return `UPDATE outbox SET ` + tombstone + ` FROM (VALUES ` + tuples(4, n) + `) AS d
		WHERE outbox.id=d.column1 AND outbox.route=d.column2 AND outbox.session=d.column3 AND outbox.state=0
		AND outbox.token=d.column4 RETURNING outbox.id, outbox.route, outbox.session, outbox.size`
}

// insertQuery inserts n records (columns, then size), skipping those whose
// key is present, and returns the Seqs of those it inserted.
func insertQuery(n int) string {
	return `INSERT INTO outbox (` + columns + `, size) VALUES ` + tuples(26, n) +
		` ON CONFLICT (id, route, session) DO NOTHING RETURNING seq`
}

// tuples returns n comma-separated tuples of k placeholders.
func tuples(k, n int) string {
	t := "(" + strings.TrimSuffix(strings.Repeat("?, ", k), ", ") + "),"
	return strings.TrimSuffix(strings.Repeat(t, n), ",")
}

// Write implements stores.Store in one transaction.
func (s *Store) Write(ctx context.Context, b *stores.Batch) error {
	if err := b.Validate(); err != nil {
		return err
	}
	if err := s.enter(ctx, true); err != nil {
		return fmt.Errorf("sqlite: write: %w", err)
	}
	defer s.leave()
	w := &write{s: s, ctx: ctx, now: s.opts.Now(), leases: map[string]int64{}, counts: map[[2]string][3]int64{},
		seqs: make([]int64, len(b.Append)), tokens: make([]int64, len(b.Append)), stale: make([]bool, len(b.Settle))}
	seq, tombs := s.seq, s.tombs
	s.tomb++
	if err := s.tx(ctx, durable(b), func() error { return w.batch(b, tombs) }); err != nil {
		s.seq, s.tombs = seq, tombs
		return fmt.Errorf("sqlite: write: %w", mapErr(err))
	}
	for i := range b.Settle {
		b.Settle[i].Stale = w.stale[i]
	}
	for i := range b.Append {
		r := &b.Append[i]
		r.Seq, r.Token = w.seqs[i], 0 // skipped: not held
		if r.Seq != 0 {
			r.Stamp(w.now)
			r.Token = w.tokens[i]
		}
	}
	return nil
}

// durable reports whether b's commit must be durable when Write returns
// (see stores.Store.Write): it appends, or drops a dead letter.
func durable(b *stores.Batch) bool {
	return len(b.Append) > 0 || slices.ContainsFunc(b.Settle, func(s stores.Settlement) bool { return s.Outcome == stores.Drop })
}

// write is one Write in progress, with what it stamps on the batch once
// committed.
type write struct {
	s      *Store
	ctx    context.Context
	now    time.Time
	leases map[string]int64       // partition lease name -> current token (0: none)
	counts map[[2]string][3]int64 // session, route -> changes of live, dead, live bytes
	seqs   []int64
	tokens []int64
	stale  []bool
}

// batch applies b in order: settlements, appends, then a compaction step
// (tombs is how many tombstones there were before it). Runs of Done
// settlements (of distinct keys) and of appends without a coalesce key go
// in multi-row statements.
func (w *write) batch(b *stores.Batch, tombs int64) error {
	s := w.s
	for i := 0; i < len(b.Settle); {
		j, seen := i, map[stores.Key]bool{}
		for ; j < len(b.Settle) && b.Settle[j].Outcome == stores.Done && !seen[b.Settle[j].Key]; j++ {
			seen[b.Settle[j].Key] = true
		}
		var err error
		if j == i {
			j, err = i+1, w.settle(i, &b.Settle[i])
		} else {
			err = runs(i, j, func(i, n int) error { return w.done(b.Settle[i:i+n], w.stale[i:i+n]) })
		}
		if err != nil {
			return err
		}
		i = j
	}
	for i := 0; i < len(b.Append); {
		j := i
		for j < len(b.Append) && (b.Append[j].CoalesceKey == "" || b.Append[j].State == stores.Dead) {
			j++
		}
		if j == i {
			j++
			if absorbed, err := w.coalesce(&b.Append[i]); absorbed || err != nil {
				i = j
				if err != nil {
					return err
				}
				continue
			}
		}
		if err := runs(i, j, func(i, n int) error { return w.insert(b.Append[i:i+n], i) }); err != nil {
			return err
		}
		i = j
	}
	if excess := s.tombs - int64(max(s.opts.DoneRetention, 0)); excess > 0 {
		n, err := s.exec(w.ctx, compactQuery, min(excess, compactStep+max(s.tombs-tombs, 0)))
		if err != nil {
			return err
		}
		s.tombs -= n
	}
	for k, c := range w.counts {
		if _, err := s.exec(w.ctx, countsQuery, k[0], k[1], c[0], c[1], c[2]); err != nil {
			return err
		}
	}
	_, err := s.exec(w.ctx, `UPDATE meta SET seq = ?`, s.seq)
	return err
}

// count records a change of the live and dead records and live bytes of a
// session and route, written to the counts table at the end of the Write.
func (w *write) count(session, route string, live, dead, bytes int64) {
	k := [2]string{session, route}
	c := w.counts[k]
	w.counts[k] = [3]int64{c[0] + live, c[1] + dead, c[2] + bytes}
}

// runs calls fn(i, n) on [i, j) cut into chunks.
func runs(i, j int, fn func(i, n int) error) error {
	for _, n := range chunks {
		for ; j-i >= n; i += n {
			if err := fn(i, n); err != nil {
				return err
			}
		}
	}
	return nil
}

// done applies the Done settlements st (of distinct keys) with one
// statement, setting stale for those that did not apply.
func (w *write) done(st []stores.Settlement, stale []bool) error {
	args, at := []any{w.s.tomb}, map[stores.Key]int{}
	for i := range st {
		args = append(args, st[i].ID, st[i].Route, st[i].Session, st[i].Token)
		at[st[i].Key], stale[i] = i, true
	}
	return w.s.each(w.ctx, doneQuery(len(st)), args, func(rs *sql.Rows) error {
		var (
			k    stores.Key
			size int64
		)
		if err := rs.Scan(&k.ID, &k.Route, &k.Session, &size); err != nil {
			return err
		}
		stale[at[k]] = false
		w.s.tombs++
		w.count(k.Session, k.Route, -1, 0, -size)
		return nil
	})
}

// settle applies one Drop, Retry or DeadLetter settlement.
func (w *write) settle(i int, st *stores.Settlement) error {
	s, ctx := w.s, w.ctx
	var (
		n   int64
		err error
	)
	switch st.Outcome {
	case stores.Drop:
		if n, err = s.exec(ctx, dropQuery, s.tomb, st.ID, st.Route, st.Session); n == 1 {
			s.tombs++
			w.count(st.Session, st.Route, 0, -1, 0)
		}
	case stores.Retry:
		n, err = s.exec(ctx, retryQuery, st.Attempts, st.ID, st.Route, st.Session,
			nanos(st.FirstAttemptAt), nanos(st.NextAttemptAt), st.Reason, st.Token)
	case stores.DeadLetter:
		var size int64
		var ok bool
		if ok, err = s.queryRow(ctx, deadLetterQuery, []any{st.Attempts, st.ID, st.Route, st.Session,
			nanos(st.FirstAttemptAt), st.Reason, nanos(cmp.Or(st.At, w.now)), st.Token}, &size); ok {
			n = 1
			w.count(st.Session, st.Route, -1, 1, -size)
		}
	}
	w.stale[i] = n != 1
	return err
}

// insert inserts the records rs (b.Append[at:]) with one statement, each
// with the next Seq, skipping those whose key is present.
func (w *write) insert(rs []stores.Record, at int) error {
	s, first := w.s, w.s.seq+1
	args := make([]any, 0, 26*len(rs))
	for i := range rs {
		r, state, deadAt := &rs[i], 0, int64(0)
		if r.State == stores.Dead {
			state, deadAt = 1, nanos(cmp.Or(r.DeadAt, w.now))
		} else if err := w.lease(r, &w.tokens[at+i]); err != nil {
			return err
		}
		headers, err := encodeHeaders(r.Envelope.Headers)
		if err != nil {
			return err
		}
		s.seq++
		e := &r.Envelope
		args = append(args, s.seq, r.Session, r.Partition, r.Route, e.ID, state, w.tokens[at+i],
			nanos(cmp.Or(r.CreatedAt, w.now)), r.CoalesceKey, nanos(e.ReceivedAt), e.Topic, e.Payload, headers,
			int64(e.QoS), e.Key, r.CausationID, r.Raw, r.Truncated, nanos(r.ExpiresAt), r.Attempts,
			nanos(r.FirstAttemptAt), nanos(r.NextAttemptAt), r.LastError, deadAt, r.DeadReason, r.Size())
	}
	return s.each(w.ctx, insertQuery(len(rs)), args, func(sc *sql.Rows) error {
		var seq int64
		if err := sc.Scan(&seq); err != nil {
			return err
		}
		w.seqs[at+int(seq-first)] = seq
		if r := &rs[seq-first]; r.State == stores.Dead {
			w.count(r.Session, r.Route, 0, 1, 0)
		} else {
			w.count(r.Session, r.Route, 1, 0, r.Size())
		}
		return nil
	})
}

// lease sets token to r.Token when that is the current token of r's
// partition lease, else to 0.
func (w *write) lease(r *stores.Record, token *int64) error {
	*token = 0
	if r.Token == 0 {
		return nil
	}
	name := stores.PartitionLease(r.Session, r.Partition)
	cur, seen := w.leases[name]
	if !seen {
		if _, err := w.s.queryRow(w.ctx, leaseQuery, []any{name}, &cur); err != nil {
			return err
		}
		w.leases[name] = cur
	}
	if cur == r.Token {
		*token = cur
	}
	return nil
}

// coalesce applies the coalesce key of live record r: absorbed when r's key
// is present or an unclaimed record of the key received later waits, else
// the unclaimed records of the key become tombstones.
func (w *write) coalesce(r *stores.Record) (absorbed bool, err error) {
	s, args := w.s, []any{w.s.tomb, r.Envelope.ID, r.Route, r.Session, r.CoalesceKey, nanos(r.Envelope.ReceivedAt), nanos(w.now)}
	var one int
	if absorbed, err = s.queryRow(w.ctx, absorbQuery, args, &one); absorbed || err != nil {
		return true, err
	}
	return false, s.each(w.ctx, replaceQuery, args[:5], func(rs *sql.Rows) error {
		var size int64
		err := rs.Scan(&size)
		s.tombs++
		w.count(r.Session, r.Route, -1, 0, -size)
		return err
	})
}
