// Package drainer delivers the records of outbox sessions. For every session
// partition whose lease this instance holds, one loop keeps the partition's
// claimed records in memory, sends them under a per-route AIMD concurrency
// limit and the sender's health, and hands each outcome (done, retry, dead
// letter) to a Settler, which writes it with the next batch of the bridge's
// group commit. See DESIGN.md §4–5 and §11.3.
//
// Records reach a partition two ways. The hot path: the bridge's writer asks
// Reserve before it appends a record, appends it claimed under the
// partition's token in the same write, and hands it over with Delivered
// once committed — the store is not read. The recovery path: the partition
// claims from the store what it does not hold (a backlog that did not fit
// in memory, records appended by other instances, requeued dead letters, and
// the claims of a previous owner, void once this owner's newer token holds
// the lease).
package drainer

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gobridge/gobridge/message"
	"github.com/gobridge/gobridge/senders"
	"github.com/gobridge/gobridge/stores"
)

// Sender delivers envelopes to one target. Send returns one error per
// envelope (nil: accepted), typed as senders.Classify expects; it must
// return when ctx is done (a send that does not is abandoned after
// send_timeout plus AbandonGrace, its slot kept until it returns).
type Sender interface {
	BatchSize() int
	Send(ctx context.Context, envs []*message.Envelope) []error
}

// Store is what the drainer needs from the outbox: claims and leases.
type Store interface {
	Claim(ctx context.Context, req stores.ClaimRequest) ([]stores.Record, error)
	stores.Leases
}

// Settler writes the drainer's settlements. Settle queues one for the next
// write and never blocks (the drainer holds at most its window of records,
// which bounds what it can queue); Flush returns once everything queued
// before it is durable, or ctx is done.
type Settler interface {
	Settle(s stores.Settlement)
	Flush(ctx context.Context) error
}

// Route is one route draining from the session.
type Route struct {
	ID     string
	Sender Sender
	// Health is the sender's, shared with every route that uses it.
	Health *senders.Health
	Policy Policy
	// Prepare runs the route's processors on the envelope of a Raw record
	// (a requeued ingest dead letter) before it is sent: drop means
	// filtered (done); an error dead-letters it again. Nil sends raw
	// records as they are.
	Prepare func(env *message.Envelope) (drop bool, err error)
	// DeadFull reports that the route holds max_dead_letters: a record that
	// would die is retried at Backoff.Max instead, without counting an
	// attempt (DESIGN.md §11.1). Nil: never full.
	DeadFull func() bool

	lim *limiter // the route's AIMD limit, set by New
}

// Options configure the drainer of one session. Every field holds its
// effective value (routes.Load applies the defaults); New panics on a
// programmer error (no session, owner or routes).
type Options struct {
	Session    string
	Partitions int
	// BatchSize is the most records one Claim takes.
	BatchSize int
	// Window is how many records a partition holds in memory (claimed and
	// not yet settled, plus those reserved by the writer). Records beyond
	// it stay in the store until the partition has room.
	Window int
	Poll   Poll
	// Routes maps route ID to route. A record of a route missing here is
	// dead-lettered with a reason.
	Routes map[string]Route
	// Owner names this process in leases: the bridge id and a nonce.
	Owner string
	// LeaseTTL is how long partition and member leases last without
	// renewal; they are renewed every LeaseTTL/3, and a partition stops
	// (cancelling its sends) once its lease is past Until − LeaseTTL/3
	// without a renewal.
	LeaseTTL time.Duration
	// ShutdownTimeout bounds how long sends in flight may finish after
	// Run's ctx is done.
	ShutdownTimeout time.Duration
	// AbandonGrace is how long past send_timeout a send that ignores its
	// context is waited for before its records are retried.
	AbandonGrace time.Duration
	// Now is the wall clock of leases, retries and expiry. Waits use the
	// runtime's timers (testing/synctest fakes both), and steps of Now are
	// told from the runtime's monotonic clock (see stores.Clock).
	Now      func() time.Time
	Logger   *slog.Logger
	Observer Observer
}

// Group drains one session: it holds a fair share of the session's
// partition leases and runs one loop per partition it holds.
type Group struct {
	opts    Options
	store   Store
	settler Settler
	log     *slog.Logger
	obs     Observer
	routes  map[string]*Route
	order   []string // route IDs, sorted: the order launch serves them in
	note    *notifier
	clock   *stores.Clock

	mu    sync.Mutex
	parts map[int]*partition // the partitions this instance drains

	// pending counts, per partition, the records the writer asked Reserve
	// for and has not handed over with Delivered yet, whatever Reserve
	// answered: a partition acquired meanwhile must not take the store's
	// silence for the end of its backlog while some of them may still
	// commit unclaimed (see partition.claim).
	pending []atomic.Int64

	sends sync.WaitGroup // every goroutine running Sender.Send
}

// New returns the drainer of one session; Run starts it.
func New(opts Options, store Store, settler Settler) *Group {
	if opts.Session == "" || opts.Owner == "" || len(opts.Routes) == 0 || store == nil || settler == nil {
		panic("drainer: New needs a session, an owner, routes, a store and a settler")
	}
	opts.Partitions = max(opts.Partitions, 1)
	opts.BatchSize = max(opts.BatchSize, 1)
	opts.Window = max(opts.Window, opts.BatchSize)
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Observer == nil {
		opts.Observer = nopObserver{}
	}
	g := &Group{
		opts: opts, store: store, settler: settler, obs: opts.Observer,
		routes: map[string]*Route{}, note: newNotifier(), parts: map[int]*partition{}, clock: stores.NewClock(opts.Now),
		pending: make([]atomic.Int64, opts.Partitions),
		log:     opts.Logger.With("component", "drainer", "session", opts.Session),
	}
	for id, r := range opts.Routes {
		if r.Sender == nil || r.Health == nil {
			panic(fmt.Sprintf("drainer: route %q needs a sender and its health", id))
		}
		r.ID, r.lim = id, newLimiter(id, r.Policy.MaxInFlight, g.obs, g.note)
		g.routes[id] = &r
	}
	g.order = slices.Sorted(maps.Keys(g.routes))
	return g
}

// Run holds this instance's fair share of the session's partition leases
// and drains each partition it holds, until ctx is done. Then each
// partition stops taking records, lets its sends in flight finish within
// ShutdownTimeout, flushes its settlements and releases its lease; what it
// still held stays claimed under its token, which the next owner's newer
// token voids. Run returns nil after a clean shutdown; it waits for every
// goroutine it started, except sends abandoned for ignoring their context,
// which it waits for only up to AbandonGrace.
func (g *Group) Run(ctx context.Context) error {
	newMembership(g).run(ctx)
	done := make(chan struct{})
	go func() { g.sends.Wait(); close(done) }()
	t := time.NewTimer(g.opts.AbandonGrace)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		g.log.Warn("sends abandoned for ignoring their context are still running at shutdown")
	}
	return nil
}

// Reserve is asked by the bridge's writer before it appends a record to
// partition n. It returns the token to append the record under (claimed)
// when this instance drains the partition, holds no backlog of it in the
// store and has room in memory; the room is kept until Delivered. It
// returns 0 otherwise: the record is appended unclaimed and the partition
// claims it later.
func (g *Group) Reserve(n int) int64 {
	if n < 0 || n >= len(g.pending) {
		return 0
	}
	g.pending[n].Add(1) // before the partition counts it (see claim)
	if p := g.part(n); p != nil {
		return p.reserve()
	}
	return 0
}

// Delivered is called by the writer, after the write committed, for every
// record it appended to this session, with the token Reserve gave for it
// (0: none; -1: Reserve was not asked). A record inserted claimed under that token joins its
// partition's loop; the others end their reservation, and a record
// inserted unclaimed tells its partition that the store holds work for it.
func (g *Group) Delivered(rec *stores.Record, reserved int64) {
	n := rec.Partition
	if p := g.part(n); p != nil {
		p.delivered(rec, reserved)
	}
	if reserved >= 0 && n >= 0 && n < len(g.pending) {
		g.pending[n].Add(-1) // after the partition forgot it (see claim)
	}
}

func (g *Group) part(n int) *partition {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.parts[n]
}

func (g *Group) now() time.Time { return g.clock.Now() }
