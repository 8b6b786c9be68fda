package dynamodb

// CheckKeysPerKey makes s check ordering keys with one query per key on
// every Claim, so that tests cover that path too.
func CheckKeysPerKey(s *Store) { s.perKeyOnly = true }
