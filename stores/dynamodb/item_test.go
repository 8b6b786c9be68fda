package dynamodb

import (
	"testing"
	"time"
)

func FuzzSplitSK(f *testing.F) {
	f.Add("sess-1", "route-a")
	f.Add("a|b", "c|d")
	f.Add("12:x", "")
	f.Fuzz(func(t *testing.T, session, route string) {
		// Arbitrary input never panics.
		_, _, _ = splitSK(session + route)
		if route == "" {
			return
		}
		s, r, ok := splitSK(recordSK(session, route))
		if !ok || s != session || r != route {
			t.Fatalf("splitSK(recordSK(%q, %q)) = %q, %q, %v", session, route, s, r, ok)
		}
	})
}

func TestDeadSK_SortsLikeDeadAtThenSeq(t *testing.T) {
	t0 := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	keys := []string{
		deadSK(t0, 9),
		deadSK(t0, 10),
		deadSK(t0.Add(time.Nanosecond), 1),
		deadSK(t0.Add(time.Hour), 1),
	}
	for i := 1; i < len(keys); i++ {
		if keys[i-1] >= keys[i] {
			t.Errorf("dead_sk %q sorts after %q", keys[i-1], keys[i])
		}
		if !cursorRE.MatchString(keys[i]) {
			t.Errorf("dead_sk %q is not a valid cursor", keys[i])
		}
	}
}
