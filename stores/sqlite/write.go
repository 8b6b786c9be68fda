package sqlite

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/gobridge/gobridge/stores"
)

// compactStep is the most tombstones one Write deletes.
const compactStep = 4096

// byKey selects a record by its key (arguments ?2 to ?4).
const byKey = `session=?2 AND route=?3 AND id=?4`

// Write implements stores.Store: one transaction, one durable commit.
func (s *Store) Write(ctx context.Context, b *stores.Batch) error {
	if err := b.Validate(); err != nil {
		return err
	}
	if err := s.enter(ctx, true); err != nil {
		return fmt.Errorf("sqlite: write: %w", err)
	}
	defer s.mu.Unlock()
	w := &write{
		s: s, ctx: ctx, now: s.opts.Now(), delta: map[pair]counts{}, leases: map[string]int64{},
		seqs: make([]int64, len(b.Append)), tokens: make([]int64, len(b.Append)), stale: make([]bool, len(b.Settle)),
	}
	seq, lo, hi := s.seq, s.tombLo, s.tombHi
	if err := s.tx(ctx, func() error { return w.batch(b) }); err != nil {
		s.seq, s.tombLo, s.tombHi = seq, lo, hi
		return fmt.Errorf("sqlite: write: %w", mapErr(err))
	}
	for p, d := range w.delta {
		s.add(p, d)
	}
	for i := range b.Settle {
		b.Settle[i].Stale = w.stale[i]
	}
	for i := range b.Append {
		r := &b.Append[i]
		if r.Seq = w.seqs[i]; r.Seq == 0 {
			continue
		}
		r.Token = w.tokens[i]
		if r.CreatedAt.IsZero() {
			r.CreatedAt = w.now
		}
		if r.State == stores.Dead {
			r.DeadAt = cmp.Or(r.DeadAt, w.now)
		} else {
			r.State = stores.Live
		}
	}
	return nil
}

// write is the state of one Write: what it stamps on the batch once
// committed, and the changes to the counters.
type write struct {
	s      *Store
	ctx    context.Context
	now    time.Time
	delta  map[pair]counts
	leases map[string]int64 // partition lease name -> current token (0: none)
	seqs   []int64
	tokens []int64
	stale  []bool
}

func (w *write) batch(b *stores.Batch) error {
	for i := range b.Settle {
		if err := w.settle(i, &b.Settle[i]); err != nil {
			return err
		}
	}
	for i := range b.Append {
		if err := w.append(i, &b.Append[i]); err != nil {
			return err
		}
	}
	s := w.s
	if excess := s.tombHi - s.tombLo - int64(max(s.opts.DoneRetention, 0)); excess > 0 && s.opts.DoneRetention > 0 {
		upto := s.tombLo + min(excess, compactStep)
		if _, err := s.exec(w.ctx, `DELETE FROM outbox WHERE state=2 AND tomb < ?`, upto); err != nil {
			return err
		}
		s.tombLo = upto
	}
	_, err := s.exec(w.ctx, `UPDATE meta SET seq = ?`, s.seq)
	return err
}

// gone is the statement that turns the record matched by where (arguments
// from ?2) into a tombstone (?1 is its number), or deletes it when the
// store keeps none.
func (w *write) gone(where string) string {
	if w.s.opts.DoneRetention < 0 {
		return `DELETE FROM outbox WHERE ` + where
	}
	return `UPDATE outbox SET state=2, tomb=?1, token=0, topic='', payload=NULL, headers=NULL, last_error='', dead_reason=''
		WHERE ` + where
}

// tombstone numbers a tombstone made by a statement that changed n rows.
func (w *write) tombstone(n int64) {
	w.s.tombHi += n
}

func (w *write) count(session, route string, live, dead int, bytes int64) {
	p := pair{session, route}
	d := w.delta[p]
	d.live, d.dead, d.bytes = d.live+live, d.dead+dead, d.bytes+bytes
	w.delta[p] = d
}

func (w *write) settle(i int, st *stores.Settlement) error {
	s, ctx := w.s, w.ctx
	var (
		size int64
		ok   bool
		err  error
	)
	switch st.Outcome {
	case stores.Done:
		ok, err = s.queryRow(ctx, w.gone(byKey+` AND state=0 AND token=?5 RETURNING size`),
			[]any{s.tombHi, st.Session, st.Route, st.ID, st.Token}, &size)
		if ok {
			w.tombstone(1)
			w.count(st.Session, st.Route, -1, 0, -size)
		}
	case stores.Drop:
		var n int64
		n, err = s.exec(ctx, w.gone(byKey+` AND state=1`), s.tombHi, st.Session, st.Route, st.ID)
		if ok = n == 1; ok {
			w.tombstone(1)
			w.count(st.Session, st.Route, 0, -1, 0)
		}
	case stores.Retry:
		var n int64
		n, err = s.exec(ctx, `UPDATE outbox SET attempts=?1, first_at=?5, next_at=?6, last_error=?7
			WHERE `+byKey+` AND state=0 AND token=?8`,
			st.Attempts, st.Session, st.Route, st.ID, nanos(st.FirstAttemptAt), nanos(st.NextAttemptAt), st.Reason, st.Token)
		ok = n == 1
	case stores.DeadLetter:
		ok, err = s.queryRow(ctx, `UPDATE outbox SET state=1, token=0, attempts=?1, first_at=?5, last_error=?6,
			dead_reason=?6, dead_at=?7 WHERE `+byKey+` AND state=0 AND token=?8 RETURNING size`,
			[]any{st.Attempts, st.Session, st.Route, st.ID, nanos(st.FirstAttemptAt), st.Reason,
				nanos(cmp.Or(st.At, w.now)), st.Token}, &size)
		if ok {
			w.count(st.Session, st.Route, -1, 1, -size)
		}
	}
	w.stale[i] = !ok
	return err
}

func (w *write) append(i int, r *stores.Record) error {
	s, ctx := w.s, w.ctx
	dead := r.State == stores.Dead
	if r.CoalesceKey != "" && !dead {
		if absorbed, err := w.coalesce(r); absorbed || err != nil {
			return err
		}
	}
	state, token, deadAt := 0, int64(0), int64(0)
	if dead {
		state, deadAt = 1, nanos(cmp.Or(r.DeadAt, w.now))
	} else if r.Token != 0 {
		name := stores.PartitionLease(r.Session, r.Partition)
		cur, seen := w.leases[name]
		if !seen {
			if _, err := s.queryRow(ctx, `SELECT token FROM lease WHERE name = ?`, []any{name}, &cur); err != nil {
				return err
			}
			w.leases[name] = cur
		}
		if cur == r.Token {
			token = cur
		}
	}
	var headers any
	if len(r.Envelope.Headers) > 0 {
		h, err := json.Marshal(r.Envelope.Headers)
		if err != nil {
			return err
		}
		headers = string(h)
	}
	size, e := r.Size(), &r.Envelope
	n, err := s.exec(ctx, `INSERT INTO outbox (seq, session, part, route, id, state, token, tomb, size, created_at, ckey,
		received_at, topic, payload, headers, qos, okey, causation, raw, truncated, expires_at, attempts, first_at,
		next_at, last_error, dead_at, dead_reason)
		VALUES (?, ?, ?, ?, ?, ?, ?, 0, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (session, route, id) DO NOTHING`,
		s.seq+1, r.Session, r.Partition, r.Route, e.ID, state, token, size, nanos(cmp.Or(r.CreatedAt, w.now)),
		r.CoalesceKey, nanos(e.ReceivedAt), e.Topic, e.Payload, headers, int64(e.QoS), e.Key, r.CausationID,
		r.Raw, r.Truncated, nanos(r.ExpiresAt), r.Attempts, nanos(r.FirstAttemptAt), nanos(r.NextAttemptAt),
		r.LastError, deadAt, r.DeadReason)
	if n == 1 {
		s.seq++
		w.seqs[i], w.tokens[i] = s.seq, token
		if dead {
			w.count(r.Session, r.Route, 0, 1, 0)
		} else {
			w.count(r.Session, r.Route, 1, 0, size)
		}
	}
	return err
}

// coalesce applies r's coalesce key: absorbed when an unclaimed record of
// the key received later is waiting (or r's key is taken), else the
// unclaimed records of the key become tombstones.
func (w *write) coalesce(r *stores.Record) (absorbed bool, err error) {
	s, ctx := w.s, w.ctx
	var one int
	if ok, err := s.queryRow(ctx, `SELECT 1 FROM outbox WHERE session=?1 AND route=?2 AND id=?3`,
		[]any{r.Session, r.Route, r.Envelope.ID}, &one); ok || err != nil {
		return true, err
	}
	st, err := s.stmt(ctx, `SELECT seq, received_at, size FROM outbox
		WHERE session=? AND route=? AND ckey=? AND state=0 AND token=0 AND ckey<>''`)
	if err != nil {
		return false, err
	}
	rows, err := st.QueryContext(ctx, r.Session, r.Route, r.CoalesceKey)
	if err != nil {
		return false, err
	}
	var old [][3]int64
	for rows.Next() {
		var o [3]int64
		if err := rows.Scan(&o[0], &o[1], &o[2]); err != nil {
			rows.Close()
			return false, err
		}
		old = append(old, o)
	}
	if err := rows.Close(); err != nil {
		return false, err
	}
	recv := nanos(r.Envelope.ReceivedAt)
	for _, o := range old {
		if o[1] > recv {
			return true, nil // a newer message is waiting: absorb this one
		}
	}
	for _, o := range old {
		if _, err := s.exec(ctx, w.gone(`seq=?2`), s.tombHi, o[0]); err != nil {
			return false, err
		}
		w.tombstone(1)
		w.count(r.Session, r.Route, -1, 0, -o[2])
	}
	return false, nil
}

// add applies d to the counters of p.
func (s *Store) add(p pair, d counts) {
	c := s.counts[p]
	if c == nil {
		c = &counts{}
		s.counts[p] = c
	}
	c.live, c.dead, c.bytes = c.live+d.live, c.dead+d.dead, c.bytes+d.bytes
	if *c == (counts{}) {
		delete(s.counts, p)
	}
}
