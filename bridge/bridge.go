// Package bridge wires a loaded configuration into a running bridge:
// receivers feed an ingest sink that matches routes, runs their processors
// and delivers each message while holding the source (direct_hold) or
// through the outbox, where one writer group-commits appends and
// settlements and one drainer group per session delivers. It also runs the
// admin HTTP server and owns the shutdown order (DESIGN.md §1–5).
package bridge

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gobridge/gobridge/admin"
	"github.com/gobridge/gobridge/receivers"
	"github.com/gobridge/gobridge/routes"
	"github.com/gobridge/gobridge/stores"
)

// Options are the process-level dependencies of a Bridge.
type Options struct {
	// Logger defaults to a discarding logger.
	Logger *slog.Logger
	// Registerer receives the bridge's metrics. When it is also a
	// prometheus.Gatherer (a *prometheus.Registry), /metrics serves it,
	// else the default gatherer; nil creates a fresh registry.
	Registerer prometheus.Registerer
	// Stdout is where stdout senders write. Defaults to os.Stdout.
	Stdout io.Writer
}

// receiver is what the bridge needs from a receiver backend.
type receiver interface {
	Run(ctx context.Context) error
	Status() receivers.Status
}

// Bridge is one running bridge. Build it with New, then call Run once.
type Bridge struct {
	cfg     *routes.Config // as started: a reload changes none of what New reads from it
	log     *slog.Logger
	base    *slog.Logger // without the component key, for the components
	stdout  io.Writer
	metrics *metrics
	owner   string // this process in leases

	store         stores.Store // nil when no outbox store is configured
	writer        *writer      // nil without a store
	limits        *admission
	cur           atomic.Pointer[parts] // the running configuration's parts
	mux           *http.ServeMux        // the admin server's
	adminLn       net.Listener          // nil when the admin listener is disabled
	adminTimeouts admin.Timeouts        // zero: admin.DefaultTimeouts (tests set others)
	journal       *admin.Journal        // delivery outcomes, for the admin API and console
	ops           *admin.Handler        // the admin API and console

	// mu serialises reloads with each other and with Run's start and
	// shutdown; running says a reload may start components with what Run set.
	mu                  sync.Mutex
	running             bool
	ingestCtx, drainCtx context.Context
	recvs, drains       sync.WaitGroup
	fail                func(error)
	reloading           atomic.Bool // a Reload holds mu

	holdCtx    context.Context // bounds direct sends; cancelled at the shutdown deadline
	holdCancel context.CancelFunc

	lastSent  sync.Map      // session -> time.Time of the last successful send, for stall detection
	gaugeMu   sync.Mutex    // orders outboxGauges with forget: a removed session's gauges stay gone
	clock     *stores.Clock // reads the wall clock for readiness, noticing steps
	closeOnce sync.Once
}

// New builds every part named by cfg (store, senders, processors,
// receivers, drainers) and opens the admin listener, without starting
// anything. cfg must come from routes.Load (defaults applied, no errors).
// A Bridge that New returned must be Run, or its resources are leaked.
func New(cfg *routes.Config, opts Options) (*Bridge, error) {
	log := cmp.Or(opts.Logger, slog.New(slog.DiscardHandler))
	reg := cmp.Or[prometheus.Registerer](opts.Registerer, prometheus.NewRegistry())
	m, err := newMetrics(reg)
	if err != nil {
		return nil, fmt.Errorf("bridge: register metrics: %w", err)
	}
	b := &Bridge{
		cfg: cfg, log: log.With("component", "bridge"), base: log, stdout: cmp.Or[io.Writer](opts.Stdout, os.Stdout), metrics: m,
		owner: ownerName(cfg.Bridge.ID), journal: admin.NewJournal(0), clock: stores.NewClock(nil),
	}
	b.holdCtx, b.holdCancel = context.WithCancel(context.Background())
	if err := b.build(reg); err != nil {
		b.Close()
		return nil, err
	}
	return b, nil
}

// build constructs the parts; on error the caller closes what was built.
func (b *Bridge) build(reg prometheus.Registerer) error {
	b.limits = newAdmission(func(context.Context) ([]stores.SessionStats, error) { return nil, nil })
	if oc := b.cfg.Stores.Outbox; oc != nil {
		st, err := openStoreBackend(*oc)
		if err != nil {
			return fmt.Errorf("bridge: open outbox store: %w", err)
		}
		b.store, b.limits.read = st, st.Stats
		b.writer = newWriter(b.store, b.metrics, b.base, b.limits)
		b.writer.drained = b.drained
	}
	p, err := b.assemble(b.cfg, nil)
	if err != nil {
		return err
	}
	b.prepare(p)
	if b.writer != nil {
		b.writer.setGroups(p.sessions)
	}
	b.cur.Store(p)
	if err := reg.Register(receiverCollector{b: b}); err != nil {
		return fmt.Errorf("bridge: register receiver metrics: %w", err)
	}
	gather, ok := reg.(prometheus.Gatherer)
	if !ok {
		gather = prometheus.DefaultGatherer
	}
	return b.openAdmin(gather)
}

// Run starts every part and blocks until ctx is done or a part fails. Then
// it shuts down in the order below, bounded by bridge.shutdown_timeout,
// after which what still runs is cancelled (nothing acknowledged is lost).
// A reload in progress finishes first. Run returns nil after a clean
// shutdown, the first part's failure, or ErrShutdownTimeout naming the
// step it waited for.
func (b *Bridge) Run(ctx context.Context) error {
	defer b.Close()
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
	var serve, writing sync.WaitGroup
	p := b.cur.Load()
	if b.store != nil {
		if err := b.checkOrphans(ingestCtx, p.sessions); err != nil {
			return err
		}
		le, err := b.claimInstance(ingestCtx)
		if err != nil {
			return err
		}
		serve.Go(func() { b.keepInstance(serveCtx, le, fail) })
		b.limits.refresh(ingestCtx, false) // count what an earlier process left before ingest starts
	}
	serve.Go(func() {
		if err := b.serveAdmin(serveCtx); err != nil {
			fail(err)
		}
	})
	serve.Go(func() { b.monitor(serveCtx) })
	if b.writer != nil {
		writing.Go(b.writer.run)
	}
	b.mu.Lock()
	b.ingestCtx, b.drainCtx, b.fail, b.running = ingestCtx, drainCtx, fail, true
	for _, s := range p.sessions {
		b.startSession(s)
	}
	for _, rc := range p.receivers {
		b.startReceiver(rc, true)
	}
	b.mu.Unlock()
	b.log.Info("bridge running", "bridge", b.cfg.Bridge.ID, "routes", len(p.routes),
		"receivers", len(p.receivers), "sessions", len(p.sessions), "admin", b.AdminAddr())

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
	hardStop := time.NewTimer(timeout + hardStopGrace)
	defer hardStop.Stop()
	stopDrain() // a reload in progress starts no drainer that would run on
	finished := make(chan struct{})
	var step atomic.Pointer[string] // what the shutdown waits for
	at := func(what string) { step.Store(&what) }
	at("a config reload in progress")
	go func() {
		defer close(finished)
		b.mu.Lock() // a reload in progress ends first, within the same bound
		b.running = false
		p := b.cur.Load()
		b.mu.Unlock()
		for _, r := range p.routes {
			r.stop()
		}
		at("receivers")
		b.recvs.Wait() // 1. receivers stop taking messages
		at("direct sends")
		for _, r := range p.routes {
			r.busy.Wait() // 2. direct sends in flight finish
			r.workers.Wait()
		}
		at("drainers")
		b.drains.Wait() // 3. drainers finish their sends and flush their outcomes
		at("the outbox writer")
		if b.writer != nil {
			b.writer.stop() // 4. what was accepted is committed and acknowledged
		}
		writing.Wait()
		at("the admin server and the instance lease")
		stopServe() // 5. the admin server goes last, so /healthz answers meanwhile
		serve.Wait()
	}()
	select {
	case <-finished:
	case <-hardStop.C:
		b.log.Error("shutdown did not finish in time; exiting with parts still running",
			"timeout", timeout+hardStopGrace, "waiting_for", *step.Load())
		return errors.Join(failed, fmt.Errorf("%w: still waiting for %s", ErrShutdownTimeout, *step.Load()))
	}
	b.log.Info("bridge stopped")
	return failed
}

// hardStopGrace is how long Run waits past shutdown_timeout for parts that
// ignore their cancellation.
const hardStopGrace = 5 * time.Second

// ErrShutdownTimeout is returned by Run when parts still ran
// shutdown_timeout plus hardStopGrace after shutdown began.
var ErrShutdownTimeout = errors.New("bridge: shutdown timed out")

// Close releases what New opened (the store, the senders, the admin
// listener) for a Bridge that will not Run.
func (b *Bridge) Close() {
	b.holdCancel()
	b.closeAll()
}

// closeAll closes what Close does; it is safe to call more than once.
func (b *Bridge) closeAll() {
	b.closeOnce.Do(func() {
		var errs []error
		if p := b.cur.Load(); p != nil {
			for _, s := range p.senders {
				errs = append(errs, s.close())
			}
		}
		if b.store != nil {
			errs = append(errs, b.store.Close())
		}
		if err := errors.Join(errs...); err != nil {
			b.log.Warn("close", "error", err)
		}
		if b.adminLn != nil {
			_ = b.adminLn.Close() // when Run never served it
		}
	})
}
