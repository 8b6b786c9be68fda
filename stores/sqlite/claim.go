package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gobridge/gobridge/stores"
)

// Claim implements stores.Outbox in one transaction: one SELECT reads the
// first req.Limit claimable live rows of the partition in seq order (due
// pending rows and lapsed claims alike) with their outbox columns, and one
// UPDATE claims them in the narrow live table.
func (s *Store) Claim(ctx context.Context, req stores.ClaimRequest) ([]stores.Record, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	out := make([]stores.Record, 0, min(req.Limit, 256))
	now := nanos(req.Now)
	var seqs []byte
	err := s.writeTx(ctx, func(tx *sql.Tx, _ map[partKey]int) error {
		out = out[:0]
		pid, err := s.pid(ctx, tx, partKey{req.Session, req.Partition}, false)
		if err != nil || pid == 0 {
			return err // no live rows in this partition, ever
		}
		rows, err := tx.StmtContext(ctx, s.stmts.claim).QueryContext(ctx,
			liveKey(pid, 0), liveKey(pid+1, 0), now, req.Limit)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			r, err := scanClaimed(rows, &req, now)
			if err != nil {
				return err
			}
			out = append(out, r)
		}
		if err := rows.Err(); err != nil {
			return err
		}
		if len(out) == 0 {
			return nil
		}
		seqs = keysJSON(seqs[:0], pid, len(out), func(i int) int64 { return out[i].Seq })
		res, err := tx.StmtContext(ctx, s.stmts.claimMark).ExecContext(ctx,
			req.Token, nanos(req.Until), now, string(seqs))
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n != int64(len(out)) {
			return fmt.Errorf("claim marked %d of %d rows", n, len(out))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("claim %s/%d: %w", req.Session, req.Partition, err)
	}
	return out, nil
}

// keysJSON appends to b the JSON array of the live keys in partition pid of
// the n seqs seq(0..n-1); with pid 0 they are the seqs themselves.
func keysJSON(b []byte, pid int64, n int, seq func(i int) int64) []byte {
	b = append(b, '[')
	for i := range n {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, liveKey(pid, seq(i)), 10)
	}
	return append(b, ']')
}

// withSeqs returns recs with each zero Seq looked up by key, so that a
// record rebuilt by the caller (not as Claim returned it) still settles. An
// unknown key keeps Seq 0, which matches no row: ErrStaleToken.
func (s *Store) withSeqs(ctx context.Context, tx *sql.Tx, recs []stores.Record) ([]stores.Record, error) {
	for i := range recs {
		if recs[i].Seq != 0 {
			continue
		}
		recs = slices.Clone(recs)
		for j := i; j < len(recs); j++ {
			r := &recs[j]
			if r.Seq != 0 {
				continue
			}
			err := tx.QueryRowContext(ctx, `SELECT seq FROM outbox WHERE session = ? AND route = ? AND id = ?`,
				r.Session, r.Route, r.Envelope.ID).Scan(&r.Seq)
			if err != nil && !errors.Is(err, sql.ErrNoRows) {
				return nil, err
			}
		}
		break
	}
	return recs, nil
}

func stale(r *stores.Record) error {
	return fmt.Errorf("%w: record %s/%s/%s (seq %d), token %d", stores.ErrStaleToken,
		r.Session, r.Route, r.Envelope.ID, r.Seq, r.Token)
}

// Complete implements stores.Outbox: one transaction, all records or none.
// The records' live rows are deleted (one statement per token and
// partition, normally one per batch) and their seqs listed in completed;
// their outbox rows stay, unchanged, as done tombstones until compaction
// (see Options.DoneRetention).
func (s *Store) Complete(ctx context.Context, recs ...stores.Record) error {
	if len(recs) == 0 {
		return nil
	}
	done := 0
	var pruned int64
	err := s.writeTx(ctx, func(tx *sql.Tx, depth map[partKey]int) error {
		done = 0
		recs, err := s.withSeqs(ctx, tx, recs)
		if err != nil {
			return err
		}
		type groupKey struct {
			token int64
			part  partKey
		}
		type routeKey struct{ session, route string }
		var (
			groups   = map[groupKey][]int{} // indexes into recs
			order    []groupKey
			seen     = make(map[int64]bool, len(recs))
			perRoute = map[routeKey]int64{}
			all      = make([]int, 0, len(recs)) // indexes of distinct records
		)
		for i := range recs {
			r := &recs[i]
			if seen[r.Seq] {
				continue
			}
			seen[r.Seq] = true
			all = append(all, i)
			k := groupKey{r.Token, partKey{r.Session, r.Partition}}
			if _, ok := groups[k]; !ok {
				order = append(order, k)
			}
			groups[k] = append(groups[k], i)
		}
		// seqs is the JSON array of the live keys (pid > 0) or the seqs of
		// recs[i] for i in idx.
		seqs := func(pid int64, idx []int) string {
			return string(keysJSON(make([]byte, 0, 20*len(idx)), pid, len(idx), func(j int) int64 { return recs[idx[j]].Seq }))
		}
		del := tx.StmtContext(ctx, s.stmts.completeLive)
		for _, k := range order {
			g := groups[k]
			pid, err := s.pid(ctx, tx, k.part, false)
			if err != nil {
				return err
			}
			if pid == 0 {
				return fmt.Errorf("%w: partition %s/%d has no live records", stores.ErrStaleToken,
					k.part.session, k.part.part)
			}
			res, err := del.ExecContext(ctx, seqs(pid, g), k.token)
			if err != nil {
				return err
			}
			n, err := res.RowsAffected()
			if err != nil {
				return err
			}
			if n != int64(len(g)) {
				return fmt.Errorf("%w: %d of %d records of %s/%d are no longer claimed under token %d",
					stores.ErrStaleToken, int64(len(g))-n, len(g), k.part.session, k.part.part, k.token)
			}
			depth[k.part] -= len(g)
			for _, i := range g {
				perRoute[routeKey{k.part.session, recs[i].Route}]++
			}
		}
		// The claimed rows are the records' own: same envelope ID and route.
		allSeqs := seqs(0, all)
		var got sql.NullString
		if err := tx.StmtContext(ctx, s.stmts.completeCheck).QueryRowContext(ctx, allSeqs).Scan(&got); err != nil {
			return err
		}
		want := make([]string, len(all))
		for j, i := range all {
			want[j] = recs[i].Envelope.ID + " " + recs[i].Route
		}
		if !sameLines(got.String, want) {
			return fmt.Errorf("%w: a record's seq holds another envelope ID or route", stores.ErrStaleToken)
		}
		if _, err := tx.StmtContext(ctx, s.stmts.completeDone).ExecContext(ctx, allSeqs); err != nil {
			return err
		}
		done = len(seen)
		minute := time.Now().Unix() / 60
		add := tx.StmtContext(ctx, s.stmts.doneCount)
		for k, n := range perRoute {
			if _, err := add.ExecContext(ctx, minute, k.session, k.route, n); err != nil {
				return err
			}
		}
		// Forget minutes older than 61, once per minute (and after a restart).
		if s.donePruned.Load() != minute {
			if _, err := tx.StmtContext(ctx, s.stmts.donePrune).ExecContext(ctx, minute-61); err != nil {
				return err
			}
		}
		pruned = minute
		return nil
	})
	if err != nil {
		return fmt.Errorf("complete %d records: %w", len(recs), err)
	}
	s.donePruned.Store(pruned)
	s.addDone(ctx, int64(done))
	return nil
}

// Release implements stores.Outbox. A record with a CoalesceKey (as Claim
// returned it) is settled against a pending record of its key appended
// while it was claimed (see settleReleased).
func (s *Store) Release(ctx context.Context, rec stores.Record, next time.Time, lastError string) error {
	var tombstoned int64
	err := s.writeTx(ctx, func(tx *sql.Tx, depth map[partKey]int) error {
		tombstoned = 0
		rs, err := s.withSeqs(ctx, tx, []stores.Record{rec})
		if err != nil {
			return err
		}
		rec := rs[0]
		pid, err := s.pid(ctx, tx, partKey{rec.Session, rec.Partition}, false)
		if err != nil {
			return err
		}
		res, err := tx.StmtContext(ctx, s.stmts.release).ExecContext(ctx,
			nanos(next), lastError, liveKey(pid, rec.Seq), rec.Token, rec.Seq, rec.Envelope.ID)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n != 1 {
			return errors.Join(err, stale(&rec))
		}
		if rec.CoalesceKey == "" {
			return nil
		}
		tombstoned, err = s.settleReleased(ctx, tx, &rec, nanos(next), depth)
		return err
	})
	if err != nil {
		return fmt.Errorf("release: %w", err)
	}
	s.addDone(ctx, tombstoned)
	return nil
}

// DeadLetter implements stores.Outbox.
func (s *Store) DeadLetter(ctx context.Context, rec stores.Record, reason string) error {
	deadAt := rec.DeadAt
	if deadAt.IsZero() {
		deadAt = time.Now()
	}
	err := s.writeTx(ctx, func(tx *sql.Tx, depth map[partKey]int) error {
		rs, err := s.withSeqs(ctx, tx, []stores.Record{rec})
		if err != nil {
			return err
		}
		rec := rs[0]
		var (
			attempts, first, next, until int64
			lastError                    string
		)
		pid, err := s.pid(ctx, tx, partKey{rec.Session, rec.Partition}, false)
		if err != nil {
			return err
		}
		err = tx.StmtContext(ctx, s.stmts.deadLive).QueryRowContext(ctx,
			liveKey(pid, rec.Seq), rec.Token).Scan(&attempts, &first, &next, &lastError, &until)
		if errors.Is(err, sql.ErrNoRows) {
			return stale(&rec)
		}
		if err != nil {
			return err
		}
		res, err := tx.StmtContext(ctx, s.stmts.dead).ExecContext(ctx, nanos(deadAt), reason, attempts, first,
			next, lastError, rec.Token, until, rec.Seq, rec.Envelope.ID)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n != 1 {
			return errors.Join(err, stale(&rec))
		}
		depth[partKey{rec.Session, rec.Partition}]--
		return nil
	})
	if err != nil {
		return fmt.Errorf("dead-letter: %w", err)
	}
	return nil
}

// sameLines reports whether the lines of got are want, in any order (the
// lines of want contain no newline).
func sameLines(got string, want []string) bool {
	lines := strings.Split(got, "\n")
	if len(lines) != len(want) {
		return false
	}
	slices.Sort(lines)
	slices.Sort(want)
	return slices.Equal(lines, want)
}
