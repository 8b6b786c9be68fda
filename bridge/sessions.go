package bridge

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gobridge/gobridge/receivers"
	"github.com/gobridge/gobridge/receivers/mqtt"
	"github.com/gobridge/gobridge/routes"
	"github.com/gobridge/gobridge/stores"
)

// Persistent MQTT sessions on a shared (DynamoDB) store are leased, so that
// a survivor can adopt the session of an instance that died (DESIGN.md
// §11.7). A returning owner asks for its session back with the lease
// want/<session lease>.
const wantPrefix = "want/"

// leasedSession reports whether rc's session is leased.
func leasedSession(cfg *routes.Config, rc routes.ReceiverConfig) bool {
	st := cfg.Stores.Outbox
	return rc.Type == routes.ReceiverMQTT && !rc.Options.CleanSession && st != nil && st.Type == "dynamodb"
}

// sessionPrefix starts the lease names of rc's sessions on its broker, in
// every instance of the same blueprint.
func sessionPrefix(rc routes.ReceiverConfig) string {
	broker := rc.Options.BrokerURLs[0]
	if u, err := url.Parse(broker); err == nil {
		broker = u.Host // never the user-info (a password)
	}
	return "mqtt/" + broker + "/" + rc.ID + "/"
}

// guarded is an mqtt receiver with a persistent session: it connects with
// its own client id only while it holds that session's lease, and runs the
// sessions it adopted from instances that are gone. Only Run touches the
// leases and the held map's entries; mu guards the map itself.
type guarded struct {
	b      *Bridge
	prefix string
	own    string        // this instance's client id
	ttl    time.Duration // of the leases: bridge.lease_ttl
	win    *receivers.Window
	build  func(clientID string, adopt bool) (receiver, error)
	log    *slog.Logger
	exited chan *leased
	base   context.Context // of the sessions' receivers; set by Run

	mu     sync.Mutex
	held   map[string]*leased // by client id
	status receivers.Status   // while the own session does not run
	want   stores.Lease       // held while asking for the own session back
}

// leased is a session whose lease is held and whose receiver runs.
type leased struct {
	id     string       // client id
	le     stores.Lease // written under mu (mayConnect reads it)
	r      receiver
	cancel context.CancelFunc
	stop   string // why it stops: "" (it runs), lost, wanted, shutdown
	err    error  // what its Run returned
}

// newGuarded wraps rc's receiver (validated by building it once).
func (b *Bridge) newGuarded(rc routes.ReceiverConfig, sink receivers.Sink, log *slog.Logger) (*guarded, error) {
	tc, err := rc.Options.TLS.Config(false)
	if err != nil {
		return nil, err
	}
	g := &guarded{
		b: b, prefix: sessionPrefix(rc), own: rc.Options.ClientID, ttl: b.cfg.Bridge.LeaseTTL.D(),
		win: receivers.NewWindow(rc.Options.MaxInflightBytes),
		log: log.With("component", "sessions", "receiver", rc.ID), exited: make(chan *leased),
		held: map[string]*leased{}, status: receivers.Status{Reason: "waiting for the lease of its session"},
	}
	g.build = func(clientID string, adopt bool) (receiver, error) {
		o := mqttOptions(rc, tc)
		o.ClientID, o.Window, o.Adopt, o.MayConnect = clientID, g.win, adopt, g.mayConnect(clientID)
		return mqtt.New(o, sink, log.With("client_id", clientID))
	}
	if _, err := g.build(g.own, false); err != nil {
		return nil, err
	}
	return g, nil
}

// Status is the own session's.
func (g *guarded) Status() receivers.Status {
	g.mu.Lock()
	defer g.mu.Unlock()
	if s := g.held[g.own]; s != nil && s.stop == "" {
		return s.r.Status()
	}
	return g.status
}

// Stats covers the own and the adopted sessions.
func (g *guarded) Stats() receivers.Stats { return g.win.Stats() }

// Adopted is how many sessions of other instances this receiver runs.
func (g *guarded) Adopted() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := len(g.held)
	if g.held[g.own] != nil {
		n--
	}
	return n
}

// Run renews, hands back and adopts every LeaseTTL/3 until ctx is done.
// Then every session disconnects, its lease still renewed, and lapses at
// once, so that a survivor can adopt it without waiting a TTL.
func (g *guarded) Run(ctx context.Context) error {
	g.base = context.WithoutCancel(ctx)
	t := time.NewTicker(g.ttl / 3) // a steady beat: a slow tick does not delay the next renewal
	defer t.Stop()
	g.tick(ctx)
	for ctx.Err() == nil {
		select {
		case <-ctx.Done():
		case s := <-g.exited:
			g.finish(ctx, s)
		case <-t.C:
			g.tick(ctx)
		}
	}
	for _, s := range g.held {
		g.halt(s, "shutdown")
	}
	for len(g.held) > 0 {
		select {
		case s := <-g.exited:
			g.finish(g.base, s)
		case <-t.C:
			g.renew(g.base)
		}
	}
	if g.want.Token != 0 {
		rctx, cancel := context.WithTimeout(g.base, g.ttl/3)
		defer cancel()
		_ = g.b.store.Release(rctx, g.want)
	}
	return nil
}

// tick renews, then takes the own session, hands adopted sessions back
// and adopts lapsed ones; each step is bounded by LeaseTTL/3.
func (g *guarded) tick(ctx context.Context) {
	g.renew(ctx)
	ctx, cancel := context.WithTimeout(ctx, g.ttl/3)
	defer cancel()
	now := time.Now()
	if g.held[g.own] == nil {
		g.takeOwn(ctx, now)
	}
	all, err := g.b.store.List(ctx, g.prefix, time.Unix(0, 0)) // lapsed leases too: not released
	if err != nil {
		g.log.Warn("list session leases", "error", err)
		return
	}
	lapsed := slices.DeleteFunc(all, func(le stores.Lease) bool {
		id := strings.TrimPrefix(le.Name, g.prefix)
		return id == g.own || g.held[id] != nil || le.Until.After(now)
	})
	if len(lapsed) == 0 && g.Adopted() == 0 {
		return // nothing to adopt or hand back: the usual case
	}
	wants, err := g.b.store.List(ctx, wantPrefix+g.prefix, now)
	if err != nil {
		g.log.Warn("list session leases", "error", err)
		return
	}
	wanted := map[string]bool{}
	for _, w := range wants {
		wanted[strings.TrimPrefix(w.Name, wantPrefix)] = true
	}
	for id, s := range g.held {
		if id != g.own && s.stop == "" && wanted[s.le.Name] {
			g.log.Info("handing an adopted session back to its owner", "client_id", id)
			g.halt(s, "wanted")
		}
	}
	for _, le := range lapsed {
		id := strings.TrimPrefix(le.Name, g.prefix)
		if wanted[le.Name] {
			continue // its owner is back and takes it
		}
		nl, err := g.b.store.Acquire(ctx, le.Name, g.b.owner, g.ttl, now)
		if err != nil {
			if !errors.Is(err, stores.ErrLeaseHeld) {
				g.log.Warn("adopt a session", "client_id", id, "error", err)
			}
			continue // another survivor was first
		}
		g.log.Warn("adopting the session of an instance that is gone", "client_id", id, "previous_owner", le.Owner)
		g.start(nl, id)
	}
}

// takeOwn takes the own session's lease, or asks its holder for it.
func (g *guarded) takeOwn(ctx context.Context, now time.Time) {
	name := g.prefix + g.own
	le, err := g.b.store.Acquire(ctx, name, g.b.owner, g.ttl, now)
	if err == nil {
		if g.want.Token != 0 {
			_ = g.b.store.Release(ctx, g.want)
			g.want = stores.Lease{}
		}
		g.start(le, g.own)
		return
	}
	g.mu.Lock()
	g.status = receivers.Status{Reason: fmt.Sprintf("waiting for the lease %s of its session: %v", name, err)}
	g.mu.Unlock()
	if !errors.Is(err, stores.ErrLeaseHeld) {
		g.log.Warn("take the session lease", "lease", name, "error", err)
		return
	}
	if g.want.Token == 0 {
		g.log.Info("session lease held by another instance; asking for it back", "lease", name, "error", err)
	}
	if g.want, err = g.b.store.Acquire(ctx, wantPrefix+name, g.b.owner, g.ttl, now); err != nil {
		g.log.Warn("ask for the session lease", "lease", name, "error", err)
	}
}

// errLeaseUnconfirmed fails a connection attempt of a session whose lease
// renew has not confirmed in time.
var errLeaseUnconfirmed = errors.New("the session's lease is not confirmed: not connecting")

// mayConnect lets the session of client id connect only while its lease is
// confirmed, as renew keeps it. A process paused
// past that (SIGSTOP, a frozen VM) finds its connection gone and would
// reconnect at once, before renew finds the lease lost: the broker would
// then take the session from the survivor that adopted it.
func (g *guarded) mayConnect(id string) func() error {
	return func() error {
		g.mu.Lock()
		defer g.mu.Unlock()
		if s := g.held[id]; s != nil && s.stop == "" && g.confirmed(s.le) {
			return nil
		}
		return errLeaseUnconfirmed
	}
}

// confirmed reports whether le is held with room to spare: before
// Until − LeaseTTL/3, when nobody else may take it yet.
func (g *guarded) confirmed(le stores.Lease) bool {
	return time.Now().Before(le.Until.Add(-g.ttl / 3))
}

// start runs a session whose lease is held: the own one, or an adopted one.
func (g *guarded) start(le stores.Lease, id string) {
	r, err := g.build(id, id != g.own)
	if err != nil { // the options were checked by newGuarded
		g.log.Error("build a session's receiver", "client_id", id, "error", err)
		return
	}
	ctx, cancel := context.WithCancel(g.base)
	s := &leased{id: id, le: le, r: r, cancel: cancel}
	g.mu.Lock()
	g.held[id] = s
	g.mu.Unlock()
	go func() {
		s.err = r.Run(ctx)
		g.exited <- s
	}()
}

// halt stops a session's receiver; a lost lease overrides other reasons.
func (g *guarded) halt(s *leased, why string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if s.stop == "" || why == "lost" {
		s.stop = why
	}
	if why == "lost" && s.id == g.own {
		g.status = receivers.Status{Reason: "the lease of its session was lost; waiting to take it again"}
	}
	s.cancel()
}

// renew renews the lease of every session; a session whose lease is lost,
// or past Until − LeaseTTL/3, disconnects.
func (g *guarded) renew(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, g.ttl/3)
	defer cancel()
	for id, s := range g.held {
		if s.stop == "lost" {
			continue
		}
		nl, err := g.b.store.Renew(ctx, s.le, g.ttl, time.Now())
		switch {
		case err == nil:
			g.mu.Lock() // mayConnect reads it
			s.le = nl
			g.mu.Unlock()
		case errors.Is(err, stores.ErrLeaseLost) || !g.confirmed(s.le):
			g.log.Warn("session lease lost: disconnecting", "client_id", id, "error", err)
			g.halt(s, "lost")
		default:
			g.log.Warn("renew a session lease", "client_id", id, "error", err)
		}
	}
}

// finish forgets a session whose receiver returned. Unless lost, its lease
// lapses at once for the owner or a survivor; one the broker no longer has
// is released for good.
func (g *guarded) finish(ctx context.Context, s *leased) {
	ctx, cancel := context.WithTimeout(ctx, g.ttl/3)
	defer cancel()
	g.mu.Lock()
	delete(g.held, s.id)
	g.mu.Unlock()
	s.cancel()
	var err error
	switch {
	case s.stop == "lost":
		return
	case errors.Is(s.err, mqtt.ErrNoSession):
		g.log.Info("the broker has no session left for this client id: releasing its lease", "client_id", s.id)
		err = g.b.store.Release(ctx, s.le)
	default:
		if s.err != nil {
			g.log.Warn("session ended; its lease lapses", "client_id", s.id, "error", s.err)
		}
		_, err = g.b.store.Renew(ctx, s.le, time.Nanosecond, time.Now())
	}
	if err != nil && !errors.Is(err, stores.ErrLeaseLost) {
		g.log.Warn("let a session lease go", "client_id", s.id, "error", err)
	}
}
