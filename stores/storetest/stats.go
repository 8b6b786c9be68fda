package storetest

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/gobridge/gobridge/stores"
)

func (s suite) stats(t *testing.T) {
	t.Run("counts live records, bytes and dead letters by route", func(t *testing.T) {
		fx := s.setup(t)
		if st := fx.sessionStats(); st.Live != 0 || st.Bytes != 0 || !st.Oldest.IsZero() || st.Partitions != 0 {
			t.Fatalf("empty session stats = %+v", st)
		}
		rs := fx.recs(3)
		rs[0].CreatedAt = at(time.Second)
		rs[1].CreatedAt = at(-time.Second)
		rs[2].Partition = 3
		d := fx.rec()
		d.Route, d.State, d.DeadReason = fx.route+"-2", stores.Dead, "bad"
		fx.append(append(rs, d)...)
		st := fx.sessionStats()
		var bytes int64
		for _, r := range rs {
			bytes += r.Size()
		}
		if st.Live != 3 || st.Bytes != bytes || st.Partitions != 4 {
			t.Errorf("live %d bytes %d partitions %d, want 3, %d and 4", st.Live, st.Bytes, st.Partitions, bytes)
		}
		wantTime(t, "Oldest", st.Oldest, at(-time.Second))
		if st.Routes[fx.route] != (stores.RouteCounts{Live: 3}) || st.Routes[fx.route+"-2"] != (stores.RouteCounts{Dead: 1}) {
			t.Errorf("routes = %+v", st.Routes)
		}
		le := fx.lease(0, "o1", t0)
		got := fx.claim(0, le, 10)
		fx.settle(stores.Done, le.Token, "", got[0])
		fx.settle(stores.DeadLetter, le.Token, "x", got[1])
		st = fx.sessionStats()
		if st.Live != 1 || st.Bytes != rs[2].Size() || st.Routes[fx.route] != (stores.RouteCounts{Live: 1, Dead: 1}) || st.Partitions != 4 {
			t.Errorf("after settling: %+v", st)
		}
		le3 := fx.lease(3, "o1", t0)
		fx.settle(stores.Done, le3.Token, "", fx.claim(3, le3, 10)...)
		if st = fx.sessionStats(); st.Live != 0 || st.Partitions != 0 {
			t.Errorf("with no live record: %+v", st)
		}
	})
}

func (s suite) concurrency(t *testing.T) {
	t.Run("parallel writers lose nothing and seqs stay unique", func(t *testing.T) {
		fx := s.setup(t)
		const writers, per = 4, 25
		var wg sync.WaitGroup
		var mu sync.Mutex
		var seqs []int64
		var want []string
		for w := range writers {
			wg.Go(func() {
				for i := range per {
					r := fx.rec()
					r.Partition = (w + i) % 2
					b := stores.Batch{Append: []stores.Record{r}}
					if err := fx.s.Write(context.Background(), &b); err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					seqs = append(seqs, b.Append[0].Seq)
					want = append(want, r.Envelope.ID)
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		got := append(fx.drain(0), fx.drain(1)...)
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("claimed %d records, want %d", len(got), len(want))
		}
		if len(slices.Compact(slices.Clone(seqs))) != len(seqs) {
			t.Error("duplicate seqs in one session")
		}
	})

	t.Run("two owners of one partition: only the newer claims", func(t *testing.T) {
		fx := s.setup(t)
		a := fx.lease(0, "a", t0)
		b := fx.lease(0, "b", at(time.Hour))
		fx.append(fx.recs(40)...)
		var wg sync.WaitGroup
		var mu sync.Mutex
		got := map[int64]int{}
		for _, le := range []stores.Lease{a, b} {
			wg.Go(func() {
				for range 5 {
					rs, err := fx.s.Claim(context.Background(), stores.ClaimRequest{Session: fx.session, Token: le.Token, Limit: 10})
					if err != nil {
						continue
					}
					mu.Lock()
					got[le.Token] += len(rs)
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		if got[a.Token] != 0 || got[b.Token] != 40 {
			t.Errorf("claims by token = %v, want all 40 by %d", got, b.Token)
		}
	})
}
