package storetest

import (
	"context"
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
		}, CreatedAt: t0}
	}
	return rs
}

// Fill appends n records to session in batches of 1,000 (the fastest way to
// build a backlog).
func Fill(tb testing.TB, s stores.Store, session string, n int) {
	tb.Helper()
	for n > 0 {
		k := min(n, 1000)
		if err := s.Write(context.Background(), &stores.Batch{Append: benchRecs(session, k)}); err != nil {
			tb.Fatalf("fill: %v", err)
		}
		n -= k
	}
}

// BenchAppend measures a Write of batch unclaimed records; one op is one
// Write. It reports records per second as "rec/s".
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
		if err := s.Write(ctx, &stores.Batch{Append: rs}); err != nil {
			b.Fatal(err)
		}
		cpu += cpuTime() - start
	}
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
	b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "rec/s")
}

// BenchClaimComplete measures claiming batch records of a backlog and
// completing them in the next Write; one op is one Claim plus one Write.
// The backlog (b.N*batch records) is appended beforehand, and backlog extra
// records stay queued behind it, to show that a claim costs the same
// whatever the backlog. It reports records per second as "rec/s".
func BenchClaimComplete(b *testing.B, s stores.Store, backlog, batch int) {
	Fill(b, s, "bench", backlog+b.N*batch)
	ctx := context.Background()
	le, err := s.Acquire(ctx, stores.PartitionLease("bench", 0), "bench", time.Hour, time.Now())
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	cpu := cpuTime()
	var after int64
	for range b.N { // not b.Loop: b.N sized the backlog above
		got, err := s.Claim(ctx, stores.ClaimRequest{Session: "bench", Token: le.Token, Limit: batch, After: after})
		if err != nil || len(got) == 0 {
			b.Fatalf("claim: %d records, %v", len(got), err)
		}
		after = got[len(got)-1].Seq
		w := stores.Batch{Settle: make([]stores.Settlement, len(got))}
		for i, r := range got {
			w.Settle[i] = stores.Settlement{Key: r.Key(), Token: le.Token, Outcome: stores.Done}
		}
		if err := s.Write(ctx, &w); err != nil {
			b.Fatal(err)
		}
	}
	reportCPU(b, cpu)
	b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "rec/s")
}

// reportCPU reports the process CPU time (user plus system, all threads)
// since start per op as "cpu-ns/op": unlike ns/op it does not count the
// time spent waiting for fsync or for other processes on a shared machine.
func reportCPU(b *testing.B, start time.Duration) {
	b.ReportMetric(float64((cpuTime()-start).Nanoseconds())/float64(b.N), "cpu-ns/op")
}

// BenchWrite measures the engine's hot path: one op is one Write of batch
// records appended claimed under their partition lease's token, plus the
// Done settlements of the previous op's records (what a drainer delivered
// meanwhile). It reports appended records per second as "rec/s" and the
// process CPU time per appended record (with its settlement) as
// "cpu-ns/rec".
func BenchWrite(b *testing.B, s stores.Store, batch int) {
	ctx := context.Background()
	le, err := s.Acquire(ctx, stores.PartitionLease("bench", 0), "bench", time.Hour, time.Now())
	if err != nil {
		b.Fatal(err)
	}
	var prev []stores.Record
	b.ReportAllocs()
	b.ResetTimer()
	var cpu time.Duration
	for range b.N {
		b.StopTimer()
		w := stores.Batch{Append: benchRecs("bench", batch), Settle: make([]stores.Settlement, len(prev))}
		for i := range w.Append {
			w.Append[i].Token = le.Token
		}
		for i, r := range prev {
			w.Settle[i] = stores.Settlement{Key: r.Key(), Token: le.Token, Outcome: stores.Done}
		}
		b.StartTimer()
		start := cpuTime()
		if err := s.Write(ctx, &w); err != nil {
			b.Fatal(err)
		}
		cpu += cpuTime() - start
		if w.Append[0].Token != le.Token {
			b.Fatalf("appended with token %d, want %d (claimed)", w.Append[0].Token, le.Token)
		}
		for _, st := range w.Settle {
			if st.Stale {
				b.Fatalf("settlement of %s stale", st.ID)
			}
		}
		prev = w.Append
	}
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N*batch), "cpu-ns/rec")
	b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "rec/s")
}
