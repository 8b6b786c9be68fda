package drainer

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/gobridge/gobridge/stores"
)

// settleTimeout bounds each store write that records an outcome; those
// writes run on a context detached from shutdown (R16).
const settleTimeout = 10 * time.Second

// partition is the drain loop of one session partition whose lease this
// instance holds.
type partition struct {
	g *Group
	n int

	mu sync.Mutex
	l  stores.Lease

	// stopCtx is cancelled to stop claiming gracefully (shutdown or
	// rebalance); lostCtx when the lease is lost (abort: no more state
	// changes). workCtx, the parent of every send, is cancelled on loss at
	// once and ShutdownTimeout after a stop.
	stopCtx    context.Context
	stopFn     context.CancelFunc
	lostCtx    context.Context
	loseFn     context.CancelFunc
	workCtx    context.Context
	cancelWork context.CancelFunc

	rnd *rand.Rand
}

func newPartition(g *Group, n int, l stores.Lease) *partition {
	p := &partition{g: g, n: n, l: l}
	p.lostCtx, p.loseFn = context.WithCancel(context.Background())
	p.stopCtx, p.stopFn = context.WithCancel(p.lostCtx)
	p.workCtx, p.cancelWork = context.WithCancel(p.lostCtx)
	p.rnd = rand.New(rand.NewPCG(uint64(l.Token), uint64(n)))
	return p
}

func (p *partition) lease() stores.Lease {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.l
}

func (p *partition) setLease(l stores.Lease) {
	p.mu.Lock()
	p.l = l
	p.mu.Unlock()
}

// stop asks the loop to stop claiming and finish gracefully.
func (p *partition) stop() { p.stopFn() }

// stopping reports whether stop (or lose) was called.
func (p *partition) stopping() bool { return p.stopCtx.Err() != nil }

// lose aborts the loop: its lease is gone, its state changes would be stale.
func (p *partition) lose() { p.loseFn() }

func (p *partition) lost() bool { return p.lostCtx.Err() != nil }

// run is the drain loop. It reports on exited when it has finished, after
// releasing its lease (unless the lease was lost).
func (p *partition) run(exited chan<- *partition) {
	g := p.g
	defer func() { exited <- p }()
	defer p.cancelWork()
	shutdownTimer := context.AfterFunc(p.stopCtx, func() {
		t := time.AfterFunc(g.cfg.ShutdownTimeout, p.cancelWork)
		context.AfterFunc(p.workCtx, func() { t.Stop() })
	})
	defer shutdownTimer()

	log := g.log.With("partition", p.n)
	w := newWaker(g.cfg.DrainStrategy)
	errStreak := 0
	for !p.stopping() {
		now := g.now()
		recs, err := g.store.Claim(p.lostCtx, stores.ClaimRequest{
			Session:   g.cfg.Session,
			Partition: p.n,
			Token:     p.lease().Token,
			Limit:     g.cfg.BatchSize,
			Now:       now,
			Until:     now.Add(g.cfg.ClaimTimeout),
		})
		if err != nil {
			if p.lost() {
				break
			}
			errStreak++
			if errStreak == 1 || errStreak%100 == 0 {
				log.Error("claim records", "error", err, "streak", errStreak)
			}
			p.wait(w.next(false, p.rnd))
			continue
		}
		errStreak = 0
		if len(recs) > 0 {
			p.process(recs)
		}
		if len(recs) >= g.cfg.BatchSize {
			continue
		}
		p.wait(w.next(len(recs) > 0, p.rnd))
	}
	if p.lost() {
		log.Warn("stopped draining: lease lost")
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), settleTimeout)
	defer cancel()
	if err := g.leases.Release(ctx, p.lease()); err != nil && !errors.Is(err, stores.ErrLeaseLost) {
		log.Warn("release partition lease", "error", err)
	}
	log.Info("stopped draining")
}

// wait blocks for d, or until Wake, stop or loss.
func (p *partition) wait(d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-p.g.wakes[p.n]:
	case <-p.stopCtx.Done():
	}
}
