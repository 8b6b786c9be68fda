package storetest

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gobridge/gobridge/message"
	"github.com/gobridge/gobridge/stores"
)

// benchPayload is a typical 200-byte telemetry message, shared by every
// benchmark record.
var benchPayload = []byte(`{"site":"plant-1","line":4,"sensor":"temp-17","value":81.25,"unit":"C","ts":"2026-03-04T05:06:07.123Z","seq":123456,"status":"ok","tags":["a","b","c"],"pad":"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"}`)

func benchRecs(session string, n int) []stores.Record {
	rs := make([]stores.Record, n)
	for i := range rs {
		rs[i] = stores.Record{Session: session, Route: "bench", Envelope: message.Envelope{
			ID: message.NewID(), Topic: "factory/1/telemetry", Payload: benchPayload, QoS: 1, ReceivedAt: t0,
		}, CreatedAt: t0, NextAttemptAt: t0}
	}
	return rs
}

// Fill appends n records to session in batches of 1,000 (the fastest way to
// build a backlog).
func Fill(tb testing.TB, s stores.Store, session string, n int) {
	tb.Helper()
	for n > 0 {
		k := min(n, 1000)
		if err := s.Append(context.Background(), benchRecs(session, k)...); err != nil {
			tb.Fatalf("fill: %v", err)
		}
		n -= k
	}
}

// BenchAppend measures Append with batch records per call; one op is one
// call. It reports records per second as "rec/s".
func BenchAppend(b *testing.B, s stores.Store, batch int) {
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	var cpu time.Duration
	for range b.N {
		b.StopTimer()
		rs := benchRecs("bench", batch)
		b.StartTimer()
		start := cpuTime()
		if err := s.Append(ctx, rs...); err != nil {
			b.Fatal(err)
		}
		cpu += cpuTime() - start
	}
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
	b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "rec/s")
}

// BenchClaimComplete measures claiming batch records and completing them,
// from b.RunParallel goroutines each with its own token, over a backlog of
// b.N*batch records appended beforehand; one op is one claim plus one
// complete. It reports records per second as "rec/s".
func BenchClaimComplete(b *testing.B, s stores.Store, batch int) {
	Fill(b, s, "bench", b.N*batch)
	var tokens atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	cpu := cpuTime()
	defer reportCPU(b, cpu)
	b.RunParallel(func(pb *testing.PB) {
		token := tokens.Add(1)
		ctx := context.Background()
		for pb.Next() {
			claimComplete(b, ctx, s, token, batch)
		}
	})
	b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "rec/s")
}

// BenchClaimBacklog measures one claim of batch records plus its complete
// while backlog records stay queued behind them, to show that a claim costs
// the same whatever the backlog. It reports records per second as "rec/s".
func BenchClaimBacklog(b *testing.B, s stores.Store, backlog, batch int) {
	Fill(b, s, "bench", backlog+b.N*batch)
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	cpu := cpuTime()
	for range b.N { // not b.Loop: b.N sized the backlog above
		claimComplete(b, ctx, s, 1, batch)
	}
	reportCPU(b, cpu)
	b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "rec/s")
}

func claimComplete(b *testing.B, ctx context.Context, s stores.Store, token int64, batch int) {
	got, err := s.Claim(ctx, stores.ClaimRequest{
		Session: "bench", Token: token, Limit: batch, Now: t0, Until: t0.Add(time.Hour),
	})
	if err != nil {
		b.Error(err)
		return
	}
	if len(got) == 0 {
		b.Error("claim found nothing: the backlog ran out")
		return
	}
	if err := s.Complete(ctx, got...); err != nil {
		b.Error(err)
	}
}

// reportCPU reports the process CPU time (user plus system, all threads)
// since start per op as "cpu-ns/op": unlike ns/op it does not count the
// time spent waiting for fsync or for other processes on a shared machine.
func reportCPU(b *testing.B, start time.Duration) {
	b.ReportMetric(float64((cpuTime()-start).Nanoseconds())/float64(b.N), "cpu-ns/op")
}
