package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/gobridge/gobridge/stores"
)

// Claim implements stores.Outbox in one transaction: lapsed claims of the
// partition go back to pending, then one UPDATE … RETURNING claims the first
// req.Limit claimable pending rows in seq order.
func (s *Store) Claim(ctx context.Context, req stores.ClaimRequest) ([]stores.Record, error) {
	if req.Session == "" || req.Partition < 0 || req.Limit < 1 {
		return nil, fmt.Errorf("claim: %w: session %q, partition %d, limit %d",
			stores.ErrInvalid, req.Session, req.Partition, req.Limit)
	}
	out := make([]stores.Record, 0, min(req.Limit, 256))
	now := nanos(req.Now)
	err := s.writeTx(ctx, func(tx *sql.Tx, _ map[partKey]int) error {
		out = out[:0]
		if _, err := tx.StmtContext(ctx, s.stmts.resetLapsed).ExecContext(ctx, req.Session, req.Partition, now); err != nil {
			return err
		}
		rows, err := tx.StmtContext(ctx, s.stmts.claim).QueryContext(ctx,
			req.Token, nanos(req.Until), now, req.Session, req.Partition, req.Limit)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			r, err := scanClaimed(rows, &req)
			if err != nil {
				return err
			}
			out = append(out, r)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("claim %s/%d: %w", req.Session, req.Partition, err)
	}
	// RETURNING does not promise an order.
	slices.SortFunc(out, func(a, b stores.Record) int { return int(a.Seq - b.Seq) })
	return out, nil
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
// Completed rows become payload-less done tombstones (see
// Options.DoneRetention).
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
		// One statement per token (normally one per batch).
		type group struct {
			seqs []int64
			want map[int64]string // seq -> envelope ID
		}
		var (
			groups = map[int64]*group{}
			order  []int64
		)
		for i := range recs {
			r := &recs[i]
			g := groups[r.Token]
			if g == nil {
				g = &group{want: map[int64]string{}}
				groups[r.Token] = g
				order = append(order, r.Token)
			}
			if _, dup := g.want[r.Seq]; !dup {
				g.seqs = append(g.seqs, r.Seq)
				g.want[r.Seq] = r.Envelope.ID
			}
		}
		type routeKey struct{ session, route string }
		perRoute := map[routeKey]int64{}
		st := tx.StmtContext(ctx, s.stmts.complete)
		for _, token := range order {
			g := groups[token]
			seqs, err := json.Marshal(g.seqs)
			if err != nil {
				return err
			}
			rows, err := st.QueryContext(ctx, string(seqs), token)
			if err != nil {
				return err
			}
			got := 0
			for rows.Next() {
				var (
					seq int64
					id  string
					k   partKey
					rt  string
				)
				if err := rows.Scan(&seq, &id, &k.session, &k.part, &rt); err != nil {
					rows.Close()
					return err
				}
				if g.want[seq] != id {
					rows.Close()
					return fmt.Errorf("%w: seq %d holds %s, not %s", stores.ErrStaleToken, seq, id, g.want[seq])
				}
				depth[k]--
				perRoute[routeKey{k.session, rt}]++
				got++
			}
			rows.Close()
			if err := rows.Err(); err != nil {
				return err
			}
			if got != len(g.seqs) {
				return fmt.Errorf("%w: %d of %d records are no longer claimed under token %d",
					stores.ErrStaleToken, len(g.seqs)-got, len(g.seqs), token)
			}
			done += got
		}
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
		res, err := tx.StmtContext(ctx, s.stmts.release).ExecContext(ctx,
			nanos(next), lastError, rec.Seq, rec.Envelope.ID, rec.Token)
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
		var k partKey
		err = tx.StmtContext(ctx, s.stmts.dead).QueryRowContext(ctx,
			nanos(deadAt), reason, rec.Seq, rec.Envelope.ID, rec.Token).Scan(&k.session, &k.part)
		if errors.Is(err, sql.ErrNoRows) {
			return stale(&rec)
		}
		if err != nil {
			return err
		}
		depth[k]--
		return nil
	})
	if err != nil {
		return fmt.Errorf("dead-letter: %w", err)
	}
	return nil
}
