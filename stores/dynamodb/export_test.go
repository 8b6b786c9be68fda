package dynamodb

// SetCounter sets the counter s believes the partition has, as a process
// whose clock is ahead (or whose view is behind) would.
func SetCounter(s *Store, session string, partition int, n int64) {
	s.wmu.Lock()
	s.seqs[partPK(session, partition)] = n
	s.wmu.Unlock()
}

// StatsShards is how many stats items a session's counts are spread over.
const StatsShards = statsShards
