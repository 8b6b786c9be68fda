package drainer

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/gobridge/gobridge/stores"
)

// pipelineDepth is how many claimed batches one partition processes at once.
const pipelineDepth = 2

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
	// Up to pipelineDepth claimed batches are in process at once, so the
	// next claim overlaps the sends of the batch before it. The store keeps
	// them apart: a claimed record is not claimed again, and a record waits
	// while an older one of its ordering key is claimed.
	var inProcess []*batchRun // oldest first
	for !p.stopping() {
		inProcess = slices.DeleteFunc(inProcess, (*batchRun).finished)
		now := g.now()
		if b := blocking(inProcess, now); b != nil {
			select {
			case <-b.done:
			case <-p.stopCtx.Done():
			}
			continue
		}
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
			b := &batchRun{until: claimDeadline(recs), done: make(chan struct{})}
			inProcess = append(inProcess, b)
			rnd := rand.New(rand.NewPCG(p.rnd.Uint64(), p.rnd.Uint64()))
			go func() {
				defer close(b.done)
				p.process(recs, rnd)
			}()
		}
		if len(recs) >= g.cfg.BatchSize {
			continue
		}
		p.wait(w.next(len(recs) > 0, p.rnd))
	}
	for _, b := range inProcess { // settled before the lease goes
		<-b.done
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

// batchRun is a claimed batch in process.
type batchRun struct {
	until time.Time     // its claim deadline (zero: none)
	done  chan struct{} // closed when it has settled
}

func (b *batchRun) finished() bool {
	select {
	case <-b.done:
		return true
	default:
		return false
	}
}

// blocking returns the batch the next claim must wait for: the oldest when
// pipelineDepth are in process, or one whose claim has lapsed at now (a
// claim would take its records over and send them a second time).
func blocking(inProcess []*batchRun, now time.Time) *batchRun {
	if len(inProcess) >= pipelineDepth {
		return inProcess[0]
	}
	for _, b := range inProcess {
		if !b.until.IsZero() && !now.Before(b.until) {
			return b
		}
	}
	return nil
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
