package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/bits"
	"time"

	"github.com/gobridge/gobridge/stores"
)

// writeTx runs fn in one BEGIN IMMEDIATE transaction on the writer and
// commits it; the commit is the durable point. Before the commit it adds
// the live rows of the pending records fn inserted with insertRow. It returns fn's error, or a
// mapped SQLite error.
func (s *Store) writeTx(ctx context.Context, fn func(tx *sql.Tx, depth map[partKey]int) error) error {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return mapErr(err)
	}
	depth := make(map[partKey]int, 1)
	s.liveLater = s.liveLater[:0]
	clear(s.pids.added)
	if err := fn(tx, depth); err != nil {
		_ = tx.Rollback()
		return mapErr(err)
	}
	for _, l := range s.liveLater {
		if err := s.addLive(ctx, tx, l.part, l.seq); err != nil {
			_ = tx.Rollback()
			return mapErr(err)
		}
	}
	add := tx.StmtContext(ctx, s.stmts.depthAdd)
	for k, d := range depth {
		if d == 0 {
			continue
		}
		if _, err := add.ExecContext(ctx, k.session, k.part, d); err != nil {
			_ = tx.Rollback()
			return mapErr(err)
		}
	}
	added := s.takePids()
	if err := tx.Commit(); err != nil {
		return mapErr(err)
	}
	s.commitPids(added)
	return nil
}

// addLive adds the live row of the live outbox row seq of partition k.
func (s *Store) addLive(ctx context.Context, tx *sql.Tx, k partKey, seq int64) error {
	if seq > maxSeq {
		return fmt.Errorf("%w: seq %d", errKeySpace, seq)
	}
	pid, err := s.pid(ctx, tx, k, true)
	if err != nil {
		return err
	}
	_, err = tx.StmtContext(ctx, s.stmts.liveOne).ExecContext(ctx, seq, pid)
	return err
}

// Append implements stores.Outbox: one transaction, one durable commit.
// A failed commit (disk full: stores.ErrFull; any I/O error) is returned and
// nothing of the call is persisted.
func (s *Store) Append(ctx context.Context, recs ...stores.Record) error {
	for i := range recs {
		if err := recs[i].Validate(); err != nil {
			return fmt.Errorf("append: %w", err)
		}
	}
	if len(recs) == 0 {
		return nil
	}
	now := time.Now()
	var tombstoned int64
	err := s.writeTx(ctx, func(tx *sql.Tx, depth map[partKey]int) error {
		tombstoned = 0
		// The pid of the call's partition (the usual batch), or of each.
		var pid int64
		one := partKey{recs[0].Session, recs[0].Partition}
		for i := range recs {
			k := partKey{recs[i].Session, recs[i].Partition}
			if i > 0 && k == one {
				continue
			}
			p, err := s.pid(ctx, tx, k, true)
			if err != nil {
				return err
			}
			if i == 0 {
				pid = p
			} else {
				pid = 0 // several partitions
			}
		}
		var (
			chunk []any // args of up to insertChunk plain records, in order
			rows  int
			added span // the seqs of the plain records added
		)
		flush := func() error {
			if rows == 0 {
				return nil
			}
			err := s.insertRows(ctx, tx, chunk, rows, depth, &added)
			chunk, rows = chunk[:0], 0
			return err
		}
		for i := range recs {
			r := &recs[i]
			if r.CoalesceKey != "" {
				if err := flush(); err != nil {
					return err
				}
				n, err := s.coalesce(ctx, tx, r, now, depth)
				if err != nil {
					return err
				}
				tombstoned += n
				continue
			}
			args, err := rowArgs(r, stores.Pending, now)
			if err != nil {
				return err
			}
			chunk = append(chunk, args...)
			rows++
			if rows == insertChunk {
				if err := flush(); err != nil {
					return err
				}
			}
		}
		if err := flush(); err != nil {
			return err
		}
		// The live rows of the plain records this call added, in one
		// statement (those with a coalesce key have theirs already).
		if added.hi == 0 {
			return nil
		}
		if added.hi > maxSeq {
			return fmt.Errorf("%w: seq %d", errKeySpace, added.hi)
		}
		loose := 0
		if added.loose {
			loose = 1
		}
		if pid != 0 {
			_, err := tx.StmtContext(ctx, s.stmts.liveSweep[0][loose]).ExecContext(ctx, added.lo, pid)
			return err
		}
		_, err := tx.StmtContext(ctx, s.stmts.liveSweep[1][loose]).ExecContext(ctx, added.lo)
		return err
	})
	if err != nil {
		return fmt.Errorf("append %d records: %w", len(recs), err)
	}
	s.addDone(ctx, tombstoned)
	return nil
}

// span is the seqs (lo, hi] that Append's statements added; hi is 0 while
// none did. It is exact unless loose: then (lo, hi] may also hold older
// rows.
type span struct {
	lo, hi int64
	loose  bool
}

// add adds the seqs first..last.
func (p *span) add(first, last int64) {
	if p.hi == 0 || first-1 < p.lo {
		p.lo = first - 1
	}
	p.hi = max(p.hi, last)
}

// insertRows inserts rows plain records whose arguments are in args, in
// multi-row statements of 32, 16, 8, 4, 2 and 1 rows (so at most six for
// any chunk). New rows count in depth and their seqs in added.
func (s *Store) insertRows(ctx context.Context, tx *sql.Tx, args []any, rows int, depth map[partKey]int, added *span) error {
	n := len(args) / rows
	for size := insertChunk; rows > 0; size /= 2 {
		for ; rows >= size; rows -= size {
			chunk := args[:size*n]
			args = args[size*n:]
			if err := s.insertSized(ctx, tx, chunk, size, n, depth, added); err != nil {
				return err
			}
		}
	}
	return nil
}

// insertSized inserts the size rows of n arguments each in args with one
// statement.
func (s *Store) insertSized(ctx context.Context, tx *sql.Tx, args []any, size, n int, depth map[partKey]int, added *span) error {
	i := bits.TrailingZeros(uint(size))
	if samePartition(args, n) {
		// One partition (the usual batch): the change count is its depth,
		// and the new rows' seqs are the last ones given (AUTOINCREMENT,
		// one writer).
		res, err := tx.StmtContext(ctx, s.stmts.insertSame[i]).ExecContext(ctx, args...)
		if err != nil {
			return err
		}
		k, err := res.RowsAffected()
		if err != nil || k == 0 {
			return err
		}
		last, err := res.LastInsertId()
		if err != nil {
			return err
		}
		if k == int64(size) {
			added.add(last-k+1, last)
		} else {
			// A skipped duplicate used up a seq too: the new rows are
			// somewhere in the size seqs up to last.
			added.add(last-int64(size)+1, last)
			added.loose = true
		}
		depth[partKey{args[0].(string), args[1].(int)}] += int(k)
		return nil
	}
	res, err := tx.StmtContext(ctx, s.stmts.insertMixed[i]).QueryContext(ctx, args...)
	if err != nil {
		return err
	}
	defer res.Close()
	for res.Next() {
		var (
			k   partKey
			seq int64
		)
		if err := res.Scan(&k.session, &k.part, &seq); err != nil {
			return err
		}
		depth[k]++
		added.add(seq, seq)
	}
	return res.Err()
}

// samePartition reports whether the rows of n arguments each in args all
// have the session and partition of the first.
func samePartition(args []any, n int) bool {
	for i := n; i < len(args); i += n {
		if args[i] != args[0] || args[i+1] != args[1] {
			return false
		}
	}
	return true
}

// rowArgs returns the arguments of sqlInsert for r in state.
func rowArgs(r *stores.Record, state stores.State, now time.Time) ([]any, error) {
	headers, err := encodeHeaders(r.Envelope.Headers)
	if err != nil {
		return nil, fmt.Errorf("encode headers of %s: %w", r.Envelope.ID, err)
	}
	created := r.CreatedAt
	if created.IsZero() {
		created = now
	}
	payload := r.Envelope.Payload
	if state == stores.Done {
		payload, headers = nil, nil
	} else if payload == nil {
		payload = []byte{}
	}
	return []any{r.Session, r.Partition, r.Route, r.Envelope.ID, r.Envelope.Topic,
		payload, headers, r.Envelope.QoS, nanos(r.Envelope.ReceivedAt), r.Envelope.Key, r.CoalesceKey,
		r.CausationID, dbState(state), r.Attempts, nanos(r.FirstAttemptAt), nanos(r.NextAttemptAt),
		r.LastError, nanos(created), nanos(r.ExpiresAt)}, nil
}

// dbState is the outbox table's state of a record in state: pending and
// claimed records are 'live' there, their claim state is in the live table.
func dbState(state stores.State) string {
	if state == stores.Pending || state == stores.Claimed {
		return "live"
	}
	return string(state)
}

// insertRow inserts r in state unless its key exists; it reports whether it
// did. ins is the transaction's s.stmts.insert. A pending record's live row
// is added at the end of the transaction (see writeTx), so that
// last_insert_rowid() stays the new row's seq.
func (s *Store) insertRow(ctx context.Context, ins *sql.Stmt, r *stores.Record, state stores.State, now time.Time) (bool, error) {
	seq, err := insertOutboxRow(ctx, ins, r, state, now)
	if seq != 0 && state == stores.Pending {
		s.liveLater = append(s.liveLater, liveRow{partKey{r.Session, r.Partition}, seq})
	}
	return seq != 0, err
}

// insertOutboxRow inserts r's outbox row in state unless its key exists; it
// returns the new row's seq, or 0.
func insertOutboxRow(ctx context.Context, ins *sql.Stmt, r *stores.Record, state stores.State, now time.Time) (int64, error) {
	args, err := rowArgs(r, state, now)
	if err != nil {
		return 0, err
	}
	res, err := ins.ExecContext(ctx, args...)
	if err != nil {
		return 0, err
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		return 0, err
	}
	return res.LastInsertId()
}

// coalesce appends r, which has a coalesce key: it replaces the newest
// pending record of its route and key, due no earlier than that one was,
// unless that one is newer, in which case r is absorbed as done. It returns how many done tombstones it made.
func (s *Store) coalesce(ctx context.Context, tx *sql.Tx, r *stores.Record, now time.Time, depth map[partKey]int) (int64, error) {
	var one int
	err := tx.StmtContext(ctx, s.stmts.exists).QueryRowContext(ctx, r.Session, r.Route, r.Envelope.ID).Scan(&one)
	if err == nil {
		return 0, nil // idempotent re-append
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return 0, err
	}
	var (
		oldSeq, oldRecv, oldNext int64
		oldPart                  int
	)
	err = tx.StmtContext(ctx, s.stmts.coalesceFind).QueryRowContext(ctx, r.Session, r.Route, r.CoalesceKey).
		Scan(&oldSeq, &oldPart, &oldRecv, &oldNext)
	found := err == nil
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return 0, err
	}
	ins := tx.StmtContext(ctx, s.stmts.insert)
	if found && nanos(r.Envelope.ReceivedAt) < oldRecv {
		// An older message never replaces a newer one.
		_, err := insertOutboxRow(ctx, ins, r, stores.Done, now)
		return 1, err
	}
	var made int64
	if found {
		if err := s.tombstoneLive(ctx, tx, r.Session, oldPart, oldSeq); err != nil {
			return 0, err
		}
		depth[partKey{r.Session, oldPart}]--
		made = 1
		if oldNext > nanos(r.NextAttemptAt) {
			// The replacement inherits the replaced record's backoff: a
			// new message must not make a backed-off key due at once.
			rr := *r
			rr.NextAttemptAt = time.Unix(0, oldNext)
			r = &rr
		}
	}
	seq, err := insertOutboxRow(ctx, ins, r, stores.Pending, now)
	if err != nil {
		return 0, err
	}
	// Its live row at once: a later record of this call may replace it.
	if err := s.addLive(ctx, tx, partKey{r.Session, r.Partition}, seq); err != nil {
		return 0, err
	}
	depth[partKey{r.Session, r.Partition}]++
	return made, nil
}

// tombstoneLive makes the live record seq of session partition part a done
// tombstone.
func (s *Store) tombstoneLive(ctx context.Context, tx *sql.Tx, session string, part int, seq int64) error {
	if _, err := tx.StmtContext(ctx, s.stmts.tombstone).ExecContext(ctx, seq); err != nil {
		return err
	}
	pid, err := s.pid(ctx, tx, partKey{session, part}, false)
	if err != nil {
		return err
	}
	_, err = tx.StmtContext(ctx, s.stmts.liveDelete).ExecContext(ctx, liveKey(pid, seq))
	return err
}
