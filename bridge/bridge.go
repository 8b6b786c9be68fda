// Package bridge wires a loaded configuration into a running bridge:
// receivers feed an ingest sink that matches routes, runs their processors
// and delivers each message either while holding the source (direct_hold)
// or through the outbox (shared_outbox): one writer group-commits the
// appends and the drainers' settlements, and one drainer group per session
// delivers. It also runs the admin HTTP server (/healthz, /readyz,
// /metrics, the API and console) and owns the shutdown order. See
// DESIGN.md §1–5 and the README section "operations".
package bridge

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"github.com/gobridge/gobridge/admin"
	"github.com/gobridge/gobridge/receivers"
	"github.com/gobridge/gobridge/routes"
	"github.com/gobridge/gobridge/senders"
	"github.com/gobridge/gobridge/stores"
)

// Options are the process-level dependencies of a Bridge.
type Options struct {
	// Logger defaults to a discarding logger.
	Logger *slog.Logger
	// Registerer receives the bridge's metrics. When it is also a
	// prometheus.Gatherer (a *prometheus.Registry), /metrics serves it;
	// nil creates a fresh registry.
	Registerer prometheus.Registerer
	// Gatherer is what /metrics serves when Registerer is not a Gatherer.
	Gatherer prometheus.Gatherer
	// Stdout is where stdout senders write. Defaults to os.Stdout.
	Stdout io.Writer
}

// receiver is what the bridge needs from a receiver backend.
type receiver interface {
	Run(ctx context.Context) error
	Status() receivers.Status
}

type namedReceiver struct {
	id string
	r  receiver
}

// Bridge is one running bridge. Build it with New, then call Run once.
type Bridge struct {
	cfg     *routes.Config
	log     *slog.Logger
	metrics *metrics
	gather  prometheus.Gatherer
	owner   string // this process in leases

	store        stores.Store // nil when no outbox store is configured
	writer       *writer      // nil without a store
	limits       *admission
	receivers    []namedReceiver
	routes       []*route
	sessions     map[string]*session
	senderHealth map[string]*senders.Health
	admin        *adminServer
	journal      *admin.Journal // delivery outcomes, for the admin API and console
	ops          *admin.Handler // the admin API and console

	// holdCtx bounds direct_hold sends; it is cancelled only when the
	// shutdown deadline passes. stopping is closed when shutdown begins.
	holdCtx    context.Context
	holdCancel context.CancelFunc
	stopping   chan struct{}
	holds      sync.WaitGroup // direct_hold deliveries in progress

	startedAt time.Time
	lastSent  sync.Map // session -> time.Time of the last successful send
	closers   []func() error
}

// New builds every part named by cfg (store, senders, processors,
// receivers, drainers) and opens the admin listener, without starting
// anything. cfg must come from routes.Load (defaults applied, no errors).
// A Bridge that New returned must be Run, or its resources are leaked.
func New(cfg *routes.Config, opts Options) (*Bridge, error) {
	if cfg == nil {
		return nil, errors.New("bridge: nil config")
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	reg, gather := opts.Registerer, opts.Gatherer
	if reg == nil {
		r := prometheus.NewRegistry()
		reg, gather = r, r
	} else if g, ok := reg.(prometheus.Gatherer); ok && gather == nil {
		gather = g
	}
	if gather == nil {
		gather = prometheus.DefaultGatherer
	}
	if opts.Stdout == nil {
		opts.Stdout = os.Stdout
	}
	m, err := newMetrics(reg)
	if err != nil {
		return nil, fmt.Errorf("bridge: register metrics: %w", err)
	}
	b := &Bridge{
		cfg: cfg, log: log.With("component", "bridge"), metrics: m, gather: gather, owner: ownerName(cfg.Bridge.ID),
		sessions: map[string]*session{}, senderHealth: map[string]*senders.Health{}, journal: admin.NewJournal(0),
		stopping: make(chan struct{}),
	}
	b.holdCtx, b.holdCancel = context.WithCancel(context.Background())
	if err := b.build(log, opts.Stdout); err != nil {
		b.holdCancel()
		b.closeAll()
		return nil, err
	}
	if err := reg.Register(receiverCollector{b: b}); err != nil {
		b.holdCancel()
		b.closeAll()
		return nil, fmt.Errorf("bridge: register receiver metrics: %w", err)
	}
	return b, nil
}

// build constructs the parts; on error the caller closes what was built.
func (b *Bridge) build(log *slog.Logger, stdout io.Writer) error {
	if err := b.openStore(); err != nil {
		return err
	}
	b.limits = newAdmission(func(ctx context.Context) ([]stores.SessionStats, error) {
		if b.store == nil {
			return nil, nil
		}
		return b.store.Stats(ctx)
	})
	if b.store != nil {
		b.writer = newWriter(b.store, b.metrics, log, b.limits)
	}
	built, health, err := b.buildSenders(log, stdout)
	if err != nil {
		return err
	}
	if err := b.buildRoutes(built, health); err != nil {
		return err
	}
	b.buildGroups(log)
	if err := b.buildReceivers(log); err != nil {
		return err
	}
	a, err := newAdminServer(b)
	if err != nil {
		return err
	}
	b.admin = a
	b.mountOperatorTools()
	return nil
}

// AdminAddr is the address the admin server listens on ("" when disabled).
func (b *Bridge) AdminAddr() string { return b.admin.addr() }

// Run starts the receivers, the writer, the drainers, the monitor and the
// admin server, and blocks until ctx is done or a part fails. Then it shuts
// down: receivers stop taking messages and drainers stop taking records;
// direct_hold sends and drainer sends in flight finish; the writer commits
// what was accepted (acknowledging it) and the drainers' outcomes; the
// drainers release their leases; the store and the admin server close.
// Shutdown is bounded by bridge.shutdown_timeout: when it passes, what
// still runs is cancelled (an unacknowledged message is redelivered later;
// nothing acknowledged is lost). Run returns nil after a clean shutdown,
// the first part's failure, or ErrShutdownTimeout when parts still ran 5s
// after the timeout.
func (b *Bridge) Run(ctx context.Context) error {
	b.startedAt = time.Now()
	defer b.closeAll()
	defer b.holdCancel()
	if b.writer != nil {
		defer b.writer.abort()
	}
	ingestCtx, stopIngest := context.WithCancel(ctx)
	defer stopIngest()
	drainCtx, stopDrain := context.WithCancel(context.WithoutCancel(ctx))
	defer stopDrain()
	serveCtx, stopServe := context.WithCancel(context.WithoutCancel(ctx))
	defer stopServe()

	var failed error
	var failOnce sync.Once
	fail := func(err error) {
		failOnce.Do(func() { failed = err })
		stopIngest()
	}
	var serve, drain, recv errgroup.Group
	if b.store != nil {
		if err := b.checkOrphans(ingestCtx); err != nil {
			return err
		}
		le, err := b.claimInstance(ingestCtx)
		if err != nil {
			return err
		}
		serve.Go(func() error { b.keepInstance(serveCtx, le); return nil })
	}
	serve.Go(func() error {
		if err := b.admin.run(serveCtx); err != nil {
			fail(err)
		}
		return nil
	})
	serve.Go(func() error { b.monitor(serveCtx); return nil })
	writerDone := make(chan struct{})
	if b.writer != nil {
		go func() { defer close(writerDone); b.writer.run() }()
	} else {
		close(writerDone)
	}
	for id, s := range b.sessions {
		drain.Go(func() error {
			if err := s.group.Run(drainCtx); err != nil {
				fail(fmt.Errorf("drainer %s: %w", id, err))
			}
			return nil
		})
	}
	for _, nr := range b.receivers {
		recv.Go(func() error {
			if err := nr.r.Run(ingestCtx); err != nil && ingestCtx.Err() == nil {
				fail(fmt.Errorf("receiver %s: %w", nr.id, err))
			}
			return nil
		})
	}
	b.log.Info("bridge running", "bridge", b.cfg.Bridge.ID, "routes", len(b.routes),
		"receivers", len(b.receivers), "sessions", len(b.sessions), "admin", b.AdminAddr())

	<-ingestCtx.Done()
	timeout := b.cfg.Bridge.ShutdownTimeout.D()
	b.log.Info("shutting down", "timeout", timeout)
	deadline := time.AfterFunc(timeout, func() {
		b.log.Warn("shutdown timeout passed; cancelling what is left")
		b.holdCancel()
		if b.writer != nil {
			b.writer.abort()
		}
	})
	defer deadline.Stop()
	close(b.stopping)
	stopDrain()
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		_ = recv.Wait()  // 1. receivers stop taking messages
		b.holds.Wait()   // 2. direct_hold sends in flight finish
		_ = drain.Wait() // 3. drainers finish their sends and flush their outcomes
		if b.writer != nil {
			b.writer.stop() // 4. what was accepted is committed and acknowledged
		}
		<-writerDone
		stopServe() // 5. the admin server goes last, so /healthz answers meanwhile
		_ = serve.Wait()
	}()
	hardStop := time.NewTimer(timeout + hardStopGrace)
	defer hardStop.Stop()
	select {
	case <-finished:
	case <-hardStop.C:
		b.log.Error("shutdown did not finish in time; exiting with parts still running", "timeout", timeout+hardStopGrace)
		return errors.Join(failed, ErrShutdownTimeout)
	}
	b.log.Info("bridge stopped")
	return failed
}

// hardStopGrace is how long Run waits past shutdown_timeout, after
// cancelling everything, before it gives up on parts that ignore it.
const hardStopGrace = 5 * time.Second

// ErrShutdownTimeout is returned by Run when parts were still running
// shutdown_timeout plus a grace period after shutdown began.
var ErrShutdownTimeout = errors.New("bridge: shutdown timed out")

// closeAll closes the store and senders; it is safe to call more than once.
func (b *Bridge) closeAll() {
	for i := len(b.closers) - 1; i >= 0; i-- {
		if err := b.closers[i](); err != nil {
			b.log.Warn("close", "error", err)
		}
	}
	b.closers = nil
	if b.admin != nil {
		b.admin.close()
	}
}

// noteSent records a successful send on a session, for stall detection.
func (b *Bridge) noteSent(session string, at time.Time) { b.lastSent.Store(session, at) }

// Handler returns the admin HTTP handler (also when the admin listener is
// disabled), for tests and for embedding.
func (b *Bridge) Handler() http.Handler { return b.admin.handler() }
