package stores_test

import (
	"hash/fnv"
	"testing"

	"github.com/gobridge/gobridge/stores"
)

func TestPartitionOf_MatchesFNV1a(t *testing.T) {
	t.Parallel()
	for _, key := range []string{"", "a", "factory/1/telemetry", "0190a0b2-7c1d-7000-8000-000000000000"} {
		h := fnv.New32a()
		h.Write([]byte(key))
		for _, n := range []int{2, 3, 7, 64} {
			want := int(h.Sum32() % uint32(n))
			if got := stores.PartitionOf(key, n); got != want {
				t.Errorf("PartitionOf(%q, %d) = %d, want %d", key, n, got, want)
			}
		}
	}
}

func TestPartitionOf_SinglePartitionIsZero(t *testing.T) {
	t.Parallel()
	for _, n := range []int{-1, 0, 1} {
		if got := stores.PartitionOf("anything", n); got != 0 {
			t.Errorf("PartitionOf(_, %d) = %d, want 0", n, got)
		}
	}
}
