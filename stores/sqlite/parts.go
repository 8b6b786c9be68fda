package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
)

// partKey names one session partition, for depth accounting.
type partKey struct {
	session string
	part    int
}

// The live table's key is liveKey(pid, seq): a partition's live rows are
// one range of the table, in seq order. Seqs below 2^43 (8.8e12 appends,
// 5.6 years at 50k a second) and pids below 2^20 fit.
const (
	seqBits = 43
	maxSeq  = 1<<seqBits - 1
	maxPid  = 1<<(63-seqBits) - 1
)

// errKeySpace is returned (wrapped) by Append when the store has used up the
// seqs or session partitions that the live table's key can hold.
var errKeySpace = errors.New("the outbox key space is exhausted")

func liveKey(pid, seq int64) int64 { return pid<<seqBits | seq }

// pids caches the parts table: each session partition's pid, the first
// column of the live table's key. Entries are only added, and only for
// rows that are committed (see writeTx).
type pids struct {
	committed map[partKey]int64 // guarded by Store.pidMu
	added     map[partKey]int64 // added by the running write transaction
}

// pid returns the pid of session partition k inside the write transaction
// tx, adding it to the parts table when create is set; without create an
// unknown partition has pid 0 (no live rows).
func (s *Store) pid(ctx context.Context, tx *sql.Tx, k partKey, create bool) (int64, error) {
	s.pidMu.RLock()
	pid, ok := s.pids.committed[k]
	s.pidMu.RUnlock()
	if ok {
		return pid, nil
	}
	if pid, ok := s.pids.added[k]; ok {
		return pid, nil
	}
	err := tx.StmtContext(ctx, s.stmts.pidFind).QueryRowContext(ctx, k.session, k.part).Scan(&pid)
	if err == nil {
		// Committed before this transaction (added ones are in s.pids.added).
		s.pidMu.Lock()
		s.pids.committed[k] = pid
		s.pidMu.Unlock()
		return pid, nil
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return 0, err
	}
	if !create {
		return 0, nil
	}
	if err := tx.StmtContext(ctx, s.stmts.pidAdd).QueryRowContext(ctx, k.session, k.part).Scan(&pid); err != nil {
		return 0, err
	}
	if pid > maxPid {
		return 0, fmt.Errorf("%w: more than %d session partitions", errKeySpace, maxPid)
	}
	s.pids.added[k] = pid
	return pid, nil
}

// takePids returns the pids the running transaction added and forgets
// them; writeTx calls it before the commit, while the transaction still
// holds the writer connection, and then commitPids after it.
func (s *Store) takePids() map[partKey]int64 {
	if len(s.pids.added) == 0 {
		return nil
	}
	added := maps.Clone(s.pids.added)
	clear(s.pids.added)
	return added
}

// commitPids makes the pids of a committed transaction known.
func (s *Store) commitPids(added map[partKey]int64) {
	if len(added) == 0 {
		return
	}
	s.pidMu.Lock()
	maps.Copy(s.pids.committed, added)
	s.pidMu.Unlock()
}

// liveRow is an outbox row of partition part whose live row is still to
// be added.
type liveRow struct {
	part partKey
	seq  int64
}
