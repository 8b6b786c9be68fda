// Package drainer delivers the records of shared_outbox sessions: for every
// session partition whose lease this instance holds, a loop claims due
// records, sends them under a per-route AIMD concurrency limit, and then
// completes them, releases them with backoff, or settles them by policy
// (dead letter or drop). See DESIGN.md §1.4–1.6 and §5, and the README
// section "delivery".
package drainer

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/gobridge/gobridge/message"
	"github.com/gobridge/gobridge/routes"
	"github.com/gobridge/gobridge/stores"
)

// Sender delivers envelopes to one target. It is implemented by the senders
// (through the bridge); the drainer never imports a sender.
type Sender interface {
	// BatchSize is the most envelopes one Send takes (1 for HTTP, up to 10
	// for SQS). Values below 1 are treated as 1.
	BatchSize() int
	// Send delivers envs and returns one error per envelope (nil: accepted),
	// typed per senders.Classify; len(result) must equal len(envs). Send
	// must return when ctx is done; one that does not is abandoned after
	// send_timeout plus Config.AbandonGrace.
	Send(ctx context.Context, envs []*message.Envelope) []error
}

// Route is one route draining from the session.
type Route struct {
	ID     string
	Sender Sender
	// Policy is the route's policy with defaults applied. Its drain-relevant
	// fields (send_timeout, max_replay_attempts, replay_budget, on_expired,
	// on_permanent_failure) are validated equal across a session's routes;
	// max_in_flight and backoff are per route.
	Policy routes.Policy
}

// Config configures the drainer of one session.
type Config struct {
	// Session is the session ID. Required.
	Session string
	// Partitions is the session's partition count. Defaults to 1.
	Partitions int
	// BatchSize is the most records per claim. Defaults to 100.
	BatchSize int
	// DrainStrategy says how long an idle partition loop waits; a
	// drain_interval has been turned into fixed_poll by the config loader.
	// Zero fields default as in DESIGN.md (fixed_poll every 1s).
	DrainStrategy routes.DrainStrategy
	// Routes maps route ID to route. A claimed record of a route missing
	// here is dead-lettered with a reason.
	Routes map[string]Route
	// Owner names this instance in leases (the bridge id). Required.
	Owner string
	// LeaseTTL is how long partition and membership leases last without
	// renewal; they are renewed every LeaseTTL/3. Defaults to 15s.
	LeaseTTL time.Duration
	// ShutdownTimeout bounds how long in-flight sends may finish after Run's
	// ctx is done. Defaults to 30s.
	ShutdownTimeout time.Duration
	// ClaimTimeout is how long a claim hides records from other owners (the
	// claim deadline is now + ClaimTimeout). Defaults to the longest route
	// send_timeout + AbandonGrace + 10s.
	ClaimTimeout time.Duration
	// AbandonGrace is how long past send_timeout a send that ignores its
	// context is waited for before it is abandoned and its records released
	// as a transient failure. Defaults to 2s.
	AbandonGrace time.Duration
	// Now is the clock used for claims, leases and backoff. Defaults to
	// time.Now. Waits use the bridge's timers (testing/synctest fakes both).
	Now func() time.Time
	// Logger defaults to a discarding logger.
	Logger *slog.Logger
	// Observer may be nil.
	Observer Observer
}

// Group drains one session: it holds a fair share of the session's partition
// leases and runs one drain loop per partition it holds.
type Group struct {
	cfg      Config
	store    stores.Outbox
	leases   stores.Leases
	log      *slog.Logger
	obs      Observer
	limiters map[string]*limiter
	note     *notifier
	wakes    []chan struct{}

	// senders tracks every goroutine that runs Sender.Send, including
	// abandoned ones.
	senders sync.WaitGroup
}

// New returns the drainer of one session. It does not start anything; see
// Run. It panics on a programmer error (no session, owner or routes).
func New(cfg Config, store stores.Outbox, leases stores.Leases) *Group {
	if cfg.Session == "" || cfg.Owner == "" || len(cfg.Routes) == 0 || store == nil || leases == nil {
		panic("drainer: New needs a session, an owner, routes, a store and a lease store")
	}
	cfg.Partitions = max(cfg.Partitions, 1)
	if cfg.BatchSize <= 0 {
		cfg.BatchSize = 100
	}
	cfg.DrainStrategy = strategyDefaults(cfg.DrainStrategy)
	if cfg.LeaseTTL <= 0 {
		cfg.LeaseTTL = 15 * time.Second
	}
	if cfg.ShutdownTimeout <= 0 {
		cfg.ShutdownTimeout = 30 * time.Second
	}
	if cfg.AbandonGrace <= 0 {
		cfg.AbandonGrace = 2 * time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	g := &Group{
		store:    store,
		leases:   leases,
		obs:      cfg.Observer,
		limiters: make(map[string]*limiter, len(cfg.Routes)),
		note:     newNotifier(),
		wakes:    make([]chan struct{}, cfg.Partitions),
	}
	if g.obs == nil {
		g.obs = nopObserver{}
	}
	rts := make(map[string]Route, len(cfg.Routes))
	var longest time.Duration
	for id, r := range cfg.Routes {
		if r.Sender == nil {
			panic(fmt.Sprintf("drainer: route %q has no sender", id))
		}
		r.ID = id
		r.Policy = policyDefaults(r.Policy)
		rts[id] = r
		longest = max(longest, r.Policy.SendTimeout.D())
		g.limiters[id] = newLimiter(id, r.Policy.MaxInFlight, g.obs, g.note)
	}
	cfg.Routes = rts
	if cfg.ClaimTimeout <= 0 {
		cfg.ClaimTimeout = longest + cfg.AbandonGrace + 10*time.Second
	}
	for i := range g.wakes {
		g.wakes[i] = make(chan struct{}, 1)
	}
	g.cfg = cfg
	g.log = cfg.Logger.With("component", "drainer", "session", cfg.Session)
	return g
}

// Wake makes the loop of partition claim at once (if this Group runs it).
// Ingest calls it right after an Append to that partition. It never blocks;
// an out-of-range partition is ignored.
func (g *Group) Wake(partition int) {
	if partition < 0 || partition >= len(g.wakes) {
		return
	}
	select {
	case g.wakes[partition] <- struct{}{}:
	default:
	}
}

// Run holds this instance's fair share of the session's partition leases and
// runs a drain loop for each partition it holds, until ctx is done. Then it
// shuts down in two phases (README "delivery"): it stops claiming, lets
// in-flight sends finish within ShutdownTimeout, records their outcomes,
// releases the records it still holds (due at once) and finally its leases.
// Run returns nil after a clean shutdown; it owns and waits for every
// goroutine it starts, except sends abandoned for ignoring their context,
// which it waits for only up to AbandonGrace after the loops stopped.
func (g *Group) Run(ctx context.Context) error {
	m := newMembership(g)
	err := m.run(ctx)
	done := make(chan struct{})
	go func() { g.senders.Wait(); close(done) }()
	t := time.NewTimer(g.cfg.AbandonGrace)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		g.log.Warn("sends abandoned for ignoring their context are still running at shutdown")
	}
	return err
}

// now returns the injected clock.
func (g *Group) now() time.Time { return g.cfg.Now() }
