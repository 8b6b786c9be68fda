// Package bridge wires a loaded configuration into a running bridge:
// receivers feed an ingest sink that matches routes, runs their processors
// and delivers each message either synchronously while holding the source
// (direct_hold) or through a group-committed outbox drained by one drainer
// group per session (shared_outbox). It also runs the admin HTTP server
// (/healthz, /readyz, /metrics) and owns the shutdown order. See DESIGN.md
// §1–3 and the README section "operations".
package bridge

import (
	"cmp"
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
	"github.com/gobridge/gobridge/drainer"
	"github.com/gobridge/gobridge/receivers"
	"github.com/gobridge/gobridge/routes"
	"github.com/gobridge/gobridge/stores"
)

// Options are the process-level dependencies of a Runtime.
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

// Runtime is one running bridge. Build it with New, then call Run once.
type Runtime struct {
	cfg     *routes.Config
	log     *slog.Logger
	metrics *metrics
	gather  prometheus.Gatherer

	outbox stores.Store // nil when no store is configured
	sqlite sqliteStores
	leases stores.Leases

	receivers []namedReceiver
	routes    []*route
	groups    map[string]*drainer.Group
	sessions  map[string]*sessionInfo
	commit    *committer // nil without an outbox store
	admin     *adminServer
	journal   *admin.Journal // delivery outcomes, for the admin API and console
	ops       *admin.Handler // the admin API and console

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

type namedReceiver struct {
	id string
	r  receiver
}

// sessionInfo is what readiness and backpressure need about one session.
type sessionInfo struct {
	id         string
	partitions int
	stallAfter time.Duration
	group      *drainer.Group
}

// New builds every part named by cfg (stores, senders, processors,
// receivers, drainer groups) and opens the admin listener, without starting
// anything. cfg must come from routes.Load (defaults applied, no errors).
// A Runtime that New returned must be Run, or its resources are leaked.
func New(cfg *routes.Config, opts Options) (*Runtime, error) {
	if cfg == nil {
		return nil, errors.New("bridge: nil config")
	}
	log := cmp.Or(opts.Logger, slog.New(slog.DiscardHandler))
	reg := opts.Registerer
	gather := opts.Gatherer
	if reg == nil {
		r := prometheus.NewRegistry()
		reg, gather = r, r
	} else if g, ok := reg.(prometheus.Gatherer); ok && gather == nil {
		gather = g
	}
	if gather == nil {
		gather = prometheus.DefaultGatherer
	}
	stdout := opts.Stdout
	if stdout == nil {
		stdout = os.Stdout
	}
	m, err := newMetrics(reg)
	if err != nil {
		return nil, fmt.Errorf("bridge: register metrics: %w", err)
	}
	holdCtx, holdCancel := context.WithCancel(context.Background())
	rt := &Runtime{
		cfg: cfg, log: log.With("component", "bridge"), metrics: m, gather: gather,
		groups: map[string]*drainer.Group{}, sessions: map[string]*sessionInfo{},
		holdCtx: holdCtx, holdCancel: holdCancel, stopping: make(chan struct{}),
	}
	if err := rt.build(log, stdout); err != nil {
		holdCancel()
		rt.closeAll()
		return nil, err
	}
	if err := reg.Register(receiverCollector{rt: rt}); err != nil {
		holdCancel()
		rt.closeAll()
		return nil, fmt.Errorf("bridge: register receiver metrics: %w", err)
	}
	return rt, nil
}

// build constructs the parts; on error the caller closes what was built.
func (rt *Runtime) build(log *slog.Logger, stdout io.Writer) error {
	if err := rt.openStores(); err != nil {
		return err
	}
	senders, err := rt.buildSenders(log, stdout)
	if err != nil {
		return err
	}
	if err := rt.buildRoutes(senders); err != nil {
		return err
	}
	if rt.outbox != nil {
		rt.commit = newCommitter(rt.outbox, rt.metrics, rt.log, rt.sessions)
	}
	rt.buildGroups(log)
	if err := rt.buildReceivers(log); err != nil {
		return err
	}
	admin, err := newAdminServer(rt)
	if err != nil {
		return err
	}
	rt.admin = admin
	rt.mountOperatorTools()
	return nil
}

// buildGroups makes one drainer group per session of shared_outbox routes.
func (rt *Runtime) buildGroups(log *slog.Logger) {
	bySession := map[string]map[string]drainer.Route{}
	for _, r := range rt.routes {
		if r.mode != routes.SharedOutbox {
			continue
		}
		if bySession[r.session] == nil {
			bySession[r.session] = map[string]drainer.Route{}
		}
		bySession[r.session][r.id] = drainer.Route{ID: r.id, Sender: r.sender, Policy: r.cfg.Policy}
	}
	for sid, rts := range bySession {
		si := rt.sessions[sid]
		var first routes.RouteConfig
		for _, r := range rt.routes {
			if r.session == sid && r.mode == routes.SharedOutbox {
				first = r.cfg
				break
			}
		}
		strategy := routes.DrainStrategy{}
		if first.Session.DrainStrategy != nil {
			strategy = *first.Session.DrainStrategy
		} else if first.Session.DrainInterval > 0 {
			strategy = routes.DrainStrategy{Type: routes.DrainFixedPoll, Interval: first.Session.DrainInterval}
		}
		g := drainer.New(drainer.Config{
			Session:         sid,
			Partitions:      si.partitions,
			BatchSize:       first.Session.BatchSize,
			DrainStrategy:   strategy,
			Routes:          rts,
			Owner:           rt.cfg.Bridge.ID,
			ShutdownTimeout: rt.shutdownTimeout(),
			Logger:          log,
			Observer:        rt.drainObserver(),
		}, rt.outbox, rt.leases)
		si.group = g
		rt.groups[sid] = g
	}
	for _, r := range rt.routes {
		if r.mode == routes.SharedOutbox {
			r.group = rt.groups[r.session]
		}
	}
}

func (rt *Runtime) shutdownTimeout() time.Duration {
	return cmp.Or(rt.cfg.Bridge.ShutdownTimeout.D(), 30*time.Second)
}

// AdminAddr is the address the admin server listens on ("" when disabled).
func (rt *Runtime) AdminAddr() string {
	if rt.admin == nil {
		return ""
	}
	return rt.admin.addr()
}

// Run starts the receivers, the group committer, the drainer groups, the
// monitor and the admin server, and blocks until ctx is done or a part fails.
// Then it shuts down: it stops ingest (receivers first) and makes the
// drainers stop claiming (they finish their in-flight sends and release what
// they hold), flushes the appends already accepted and calls their done
// callbacks, lets direct_hold sends in flight finish, and finally closes the
// stores and the admin server. Shutdown is bounded by
// bridge.shutdown_timeout: when it passes, what still runs is cancelled (an
// unacknowledged message is redelivered later; nothing acknowledged is
// lost). Run returns nil after a clean shutdown, the first part's failure,
// or ErrShutdownTimeout when parts still ran 5s after the timeout. Every
// goroutine Run starts has returned when Run returns nil, apart from sends
// the drainer abandoned for ignoring their context.
func (rt *Runtime) Run(ctx context.Context) error {
	rt.startedAt = time.Now()
	defer rt.closeAll()
	defer rt.holdCancel()
	if rt.commit != nil {
		defer rt.commit.abort()
	}

	// Contexts by shutdown phase: ingest stops first, drainers last.
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

	var bg errgroup.Group // admin server, monitor, committer, drainers
	if rt.admin != nil {
		bg.Go(func() error {
			if err := rt.admin.run(serveCtx); err != nil {
				fail(err)
			}
			return nil
		})
	}
	bg.Go(func() error { rt.monitor(serveCtx); return nil })
	commitDone := make(chan struct{})
	if rt.commit != nil {
		bg.Go(func() error { defer close(commitDone); rt.commit.run(); return nil })
	} else {
		close(commitDone)
	}
	for sid, g := range rt.groups {
		bg.Go(func() error {
			if err := g.Run(drainCtx); err != nil {
				fail(fmt.Errorf("drainer %s: %w", sid, err))
			}
			return nil
		})
	}

	var recv errgroup.Group // receivers, and the replayer that ingests like one
	recv.Go(func() error { rt.replayRequeued(ingestCtx); return nil })
	for _, nr := range rt.receivers {
		recv.Go(func() error {
			if err := nr.r.Run(ingestCtx); err != nil && ingestCtx.Err() == nil {
				fail(fmt.Errorf("receiver %s: %w", nr.id, err))
			}
			return nil
		})
	}
	rt.log.Info("bridge running", "bridge", rt.cfg.Bridge.ID, "routes", len(rt.routes),
		"receivers", len(rt.receivers), "sessions", len(rt.groups), "admin", rt.AdminAddr())

	<-ingestCtx.Done()
	rt.log.Info("shutting down", "timeout", rt.shutdownTimeout())
	deadline := time.AfterFunc(rt.shutdownTimeout(), func() {
		rt.log.Warn("shutdown timeout passed; cancelling what is left")
		rt.holdCancel()
		if rt.commit != nil {
			rt.commit.abort()
		}
		stopDrain()
	})
	defer deadline.Stop()
	close(rt.stopping)

	// The drainers stop claiming now too: they finish their in-flight sends
	// while ingest flushes, so the whole shutdown fits in one timeout.
	stopDrain()
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		// 1. Receivers stop taking messages.
		_ = recv.Wait()
		// 2. Accepted appends are committed and acknowledged; direct_hold
		// sends in flight finish (their retries stop at once).
		if rt.commit != nil {
			rt.commit.stop()
		}
		<-commitDone
		rt.holds.Wait()
		// 3. The admin server and the monitor go last, so /healthz answers
		// during the shutdown; bg also waits for the drainers.
		stopServe()
		_ = bg.Wait()
	}()
	hardStop := time.NewTimer(rt.shutdownTimeout() + hardStopGrace)
	defer hardStop.Stop()
	select {
	case <-finished:
	case <-hardStop.C:
		rt.log.Error("shutdown did not finish in time; exiting with parts still running",
			"timeout", rt.shutdownTimeout()+hardStopGrace)
		return errors.Join(failed, ErrShutdownTimeout)
	}
	rt.log.Info("bridge stopped")
	return failed
}

// hardStopGrace is how long Run waits past shutdown_timeout, after
// cancelling everything, before it gives up on parts that ignore it.
const hardStopGrace = 5 * time.Second

// ErrShutdownTimeout is returned by Run when parts were still running
// shutdown_timeout plus a grace period after shutdown began.
var ErrShutdownTimeout = errors.New("bridge: shutdown timed out")

// closeAll closes stores and senders; it is safe to call more than once.
func (rt *Runtime) closeAll() {
	for i := len(rt.closers) - 1; i >= 0; i-- {
		if err := rt.closers[i](); err != nil {
			rt.log.Warn("close", "error", err)
		}
	}
	rt.closers = nil
	if rt.admin != nil {
		rt.admin.close()
	}
}

// stoppingNow reports whether shutdown has begun.
func (rt *Runtime) stoppingNow() bool {
	select {
	case <-rt.stopping:
		return true
	default:
		return false
	}
}

// noteSent records a successful send on a session, for stall detection.
func (rt *Runtime) noteSent(session string, at time.Time) { rt.lastSent.Store(session, at) }

// Handler returns the admin HTTP handler (also when the admin listener is
// disabled), for tests and for embedding.
func (rt *Runtime) Handler() http.Handler { return rt.admin.handler() }

var _ receivers.Sink = (*ingest)(nil)
