package dynamodb

import "github.com/gobridge/gobridge/stores"

// SetCounter sets the counter s believes the partition has, as a process
// whose clock is ahead (or whose view is behind) would.
func SetCounter(s *Store, session string, partition int, n int64) {
	s.wmu.Lock()
	s.seqs[partPK(session, partition)] = n
	s.wmu.Unlock()
}

// StatsShards is how many stats items a session's counts are spread over.
const StatsShards = statsShards

// KeyItem is the table key of the key item (live record or tombstone) of k.
func KeyItem(k stores.Key) (pk, sk string) {
	it := keyOf(k)
	return getS(it, "pk"), getS(it, "sk")
}
