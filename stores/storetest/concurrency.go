package storetest

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gobridge/gobridge/stores"
)

func (s suite) concurrency(t *testing.T) {
	t.Run("concurrent appenders and claimers complete every record exactly once", func(t *testing.T) {
		fx := s.setup(t)
		const (
			appenders = 4
			batches   = 20
			batchSize = 5
			claimers  = 3
			total     = appenders * batches * batchSize
		)
		var (
			mu        sync.Mutex
			completed = make(map[string]int, total)
			appended  atomic.Int64
			wg        sync.WaitGroup
			failed    atomic.Bool
		)
		ctx := t.Context()
		for range appenders {
			wg.Go(func() {
				for range batches {
					rs := fx.recs(batchSize)
					// Re-append the previous record too: a duplicate
					// from a redelivering broker.
					if err := fx.s.Append(ctx, rs...); err != nil {
						t.Errorf("Append: %v", err)
						failed.Store(true)
						return
					}
					if err := fx.s.Append(ctx, rs[0]); err != nil {
						t.Errorf("re-Append: %v", err)
						failed.Store(true)
						return
					}
					appended.Add(batchSize)
				}
			})
		}
		deadline := time.Now().Add(60 * time.Second)
		for c := range claimers {
			token := int64(c + 1)
			wg.Go(func() {
				for !failed.Load() {
					mu.Lock()
					n := len(completed)
					mu.Unlock()
					if n == total {
						return
					}
					if time.Now().After(deadline) {
						t.Errorf("claimer %d: gave up with %d of %d records completed", token, n, total)
						failed.Store(true)
						return
					}
					got, err := fx.s.Claim(ctx, stores.ClaimRequest{
						Session: fx.session, Token: token, Limit: 8, Now: t0, Until: at(time.Hour),
					})
					if err != nil {
						t.Errorf("Claim: %v", err)
						failed.Store(true)
						return
					}
					if len(got) == 0 {
						continue
					}
					if err := fx.s.Complete(ctx, got...); err != nil {
						t.Errorf("Complete: %v", err)
						failed.Store(true)
						return
					}
					mu.Lock()
					for _, r := range got {
						completed[r.Envelope.ID]++
					}
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		if failed.Load() {
			return
		}
		for id, n := range completed {
			if n != 1 {
				t.Errorf("record %s completed %d times", id, n)
			}
		}
		if len(completed) != total || appended.Load() != total {
			t.Errorf("completed %d distinct records of %d appended, want %d", len(completed), appended.Load(), total)
		}
		if st := fx.stats(); st.Pending != 0 {
			t.Errorf("Stats.Pending = %d, want 0", st.Pending)
		}
	})
}
