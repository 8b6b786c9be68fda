package dynamodb

import "testing"

func FuzzCounterSK(f *testing.F) {
	f.Add(3, "route-a", int64(29_000_000))
	f.Add(0, "a#b|c", int64(0))
	f.Add(7, "", int64(1))
	f.Fuzz(func(t *testing.T, shard int, route string, minute int64) {
		if shard < 0 || minute < 0 {
			return
		}
		if got, ok := routeOfCounter(counterSK(shard, route)); !ok || got != route {
			t.Errorf("routeOfCounter(counterSK(%d, %q)) = %q, %v", shard, route, got, ok)
		}
		m, got, ok := parseDoneSK(doneSK(minute, shard, route))
		if !ok || got != route || m != minute {
			t.Errorf("parseDoneSK(doneSK(%d, %d, %q)) = %d, %q, %v", minute, shard, route, m, got, ok)
		}
	})
}

func TestCounters_IgnoreEarlierPerSessionShards(t *testing.T) {
	if _, ok := routeOfCounter("live#3"); ok {
		t.Error(`routeOfCounter("live#3") is ok; the per-session shards of earlier versions have no route`)
	}
	if _, _, ok := parseDoneSK("done#x#1#r"); ok {
		t.Error(`parseDoneSK accepted a non-numeric minute`)
	}
}
