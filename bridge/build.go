package bridge

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"time"

	"github.com/gobridge/gobridge/drainer"
	"github.com/gobridge/gobridge/message"
	"github.com/gobridge/gobridge/routes"
	"github.com/gobridge/gobridge/senders"
	"github.com/gobridge/gobridge/senders/stdout"
	"github.com/gobridge/gobridge/stores"
)

// route is one configured route, ready to take messages.
type route struct {
	id     string
	topic  string
	mode   string
	sender drainer.Sender
	health *senders.Health
	policy drainer.Policy
	// process runs the processors and sets the ordering key; nil: none.
	process func(env *message.Envelope) (drop bool, coalesceKey string, err error)
	// session and partitions: where an outbox route's records go.
	session    string
	partitions int
	// home is the session that keeps the route's ingest dead letters and
	// replays them once requeued: its session, or "~" + id for a
	// direct_hold route.
	home           string
	homePartitions int
	ttl            time.Duration
	stallAfter     time.Duration
	directTimeout  time.Duration
	dlq            bool      // failures are dead-lettered (else dropped)
	hold           *holder   // direct_hold only
	fallback       *fallback // direct_or_outbox only
}

// session is one outbox session and its drainer.
type session struct {
	id         string
	partitions int
	batch      int
	poll       drainer.Poll
	stallAfter time.Duration
	routes     map[string]drainer.Route
	group      *drainer.Group
}

// homePrefix starts the names of the sessions that keep the ingest dead
// letters of direct_hold routes.
const homePrefix = "~"

// ownerName names this process in leases: the bridge id and a nonce, so
// that two processes with one bridge.id never take each other's leases.
func ownerName(bridgeID string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return bridgeID + "/" + hex.EncodeToString(b[:])
}

// buildSenders constructs every sender that a route uses, with its health.
func (b *Bridge) buildSenders(log *slog.Logger, out io.Writer) (map[string]drainer.Sender, map[string]*senders.Health, error) {
	maxInFlight := map[string]int{}
	for _, r := range b.cfg.Routes {
		maxInFlight[r.Sender] = max(maxInFlight[r.Sender], r.Policy.MaxInFlight)
	}
	built, health := map[string]drainer.Sender{}, map[string]*senders.Health{}
	for _, sc := range b.cfg.Senders {
		if _, used := maxInFlight[sc.ID]; !used {
			continue
		}
		var s drainer.Sender
		var err error
		if sc.Type == routes.SenderStdout {
			s = stdout.New(out)
		} else {
			s, err = newSenderBackend(sc, maxInFlight[sc.ID], log)
		}
		if err != nil {
			return nil, nil, fmt.Errorf("bridge: sender %s: %w", sc.ID, err)
		}
		if c, ok := s.(interface{ Close() error }); ok {
			b.closers = append(b.closers, c.Close)
		}
		built[sc.ID] = s
		health[sc.ID] = b.newHealth(sc.ID)
	}
	return built, health, nil
}

// newHealth makes a sender's health, reported as gobridge_sender_up, in
// the log and in the journal.
func (b *Bridge) newHealth(id string) *senders.Health {
	h := senders.NewHealth()
	b.metrics.senderUp.WithLabelValues(id).Set(1)
	h.OnChange = func(up bool, lastErr string) {
		b.metrics.senderUp.WithLabelValues(id).Set(b2f(up))
		if up {
			b.log.Info("sender is up again", "sender", id)
		} else {
			b.log.Warn("sender is down: probing it once per backoff step", "sender", id, "error", lastErr)
		}
		b.journal.SenderState(id, up, lastErr)
	}
	b.senderHealth[id] = h
	return h
}

// buildRoutes compiles each route and groups the outbox routes by session.
func (b *Bridge) buildRoutes(built map[string]drainer.Sender, health map[string]*senders.Health) error {
	for _, rc := range b.cfg.Routes {
		p := rc.Policy
		r := &route{
			id: rc.ID, topic: rc.Topic, mode: rc.DeliveryMode, sender: built[rc.Sender], health: health[rc.Sender],
			policy: drainer.Policy{
				MaxInFlight: p.MaxInFlight, SendTimeout: p.SendTimeout.D(),
				MaxReplayAttempts: p.MaxReplayAttempts, ReplayBudget: p.ReplayBudget.D(),
				DropExpired: p.OnExpired == routes.PolicyDrop, DropPermanent: p.OnPermanentFailure == routes.PolicyDrop,
				Backoff: drainer.Backoff{Initial: p.Backoff.InitialInterval.D(), Max: p.Backoff.MaxInterval.D(), Multiplier: p.Backoff.Multiplier},
			},
			ttl: p.TTL.D(), stallAfter: p.StallAfter.D(), directTimeout: p.DirectTimeout.D(),
			dlq: p.OnPermanentFailure == routes.PolicyDLQ && b.store != nil,
		}
		if r.sender == nil {
			return fmt.Errorf("bridge: route %s: unknown sender %q", rc.ID, rc.Sender)
		}
		proc, err := compileProcessors(rc)
		if err != nil {
			return fmt.Errorf("bridge: route %s: %w", rc.ID, err)
		}
		r.process = proc
		switch r.mode {
		case routes.SharedOutbox, routes.DirectOrOutbox:
			if b.store == nil || rc.Session.ID == "" {
				return fmt.Errorf("bridge: route %s: %s needs stores.outbox and session.id", rc.ID, r.mode)
			}
			r.session, r.partitions = rc.Session.ID, rc.Session.Partitions
			r.home, r.homePartitions = r.session, r.partitions
			if r.mode == routes.DirectOrOutbox {
				r.fallback = newFallback(b, r)
			}
		case routes.DirectHold:
			r.hold = newHolder(b, r)
			r.home, r.homePartitions = homePrefix+rc.ID, 1
		default:
			return fmt.Errorf("bridge: route %s: unknown delivery_mode %q", rc.ID, r.mode)
		}
		if b.store != nil {
			b.addToSession(r, rc)
		}
		b.metrics.initRoute(r.id)
		b.routes = append(b.routes, r)
	}
	return nil
}

// addToSession registers r with its home session (creating it), its
// admission limits and its drainer route.
func (b *Bridge) addToSession(r *route, rc routes.RouteConfig) {
	s := b.sessions[r.home]
	if s == nil {
		s = &session{id: r.home, partitions: r.homePartitions, batch: routes.DefaultSessionBatchSize,
			poll: drainer.Poll{Min: time.Second, Max: 30 * time.Second, Multiplier: 2}, stallAfter: r.stallAfter,
			routes: map[string]drainer.Route{}}
		if rc.UsesOutbox() {
			s.batch = rc.Session.BatchSize
			if ds := rc.Session.DrainStrategy; ds.Type == routes.DrainAdaptiveBackoff {
				s.poll = drainer.Poll{Min: ds.MinInterval.D(), Max: ds.MaxInterval.D(), Multiplier: ds.Multiplier}
			} else {
				s.poll = drainer.Poll{Min: ds.Interval.D(), Max: ds.Interval.D()}
			}
		}
		b.sessions[r.home] = s
		b.limits.addSession(r.home, rc.Policy.MaxOutboxDepth, rc.Policy.MaxOutboxBytes)
	}
	s.stallAfter = min(s.stallAfter, r.stallAfter)
	b.limits.addRoute(r.id, rc.Policy.MaxDeadLetters)
	prep := func(env *message.Envelope) (bool, error) {
		if r.process == nil {
			return false, nil
		}
		drop, _, err := r.process(env)
		return drop, err
	}
	dr := drainer.Route{
		Sender: r.sender, Health: r.health, Policy: r.policy, Prepare: prep,
		DeadFull: func() bool { return b.limits.deadFull(r.id) },
	}
	for _, id := range append([]string{r.id}, rc.PreviousIDs...) {
		s.routes[id] = dr
	}
}

// buildGroups makes one drainer group per session.
func (b *Bridge) buildGroups(log *slog.Logger) {
	ids := make([]string, 0, len(b.sessions))
	for id := range b.sessions {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		s := b.sessions[id]
		s.group = drainer.New(drainer.Options{
			Session: id, Partitions: s.partitions, BatchSize: s.batch,
			Window: max(4*s.batch, 1024), Poll: s.poll, Routes: s.routes,
			Owner: b.owner, LeaseTTL: b.leaseTTL(), ShutdownTimeout: b.cfg.Bridge.ShutdownTimeout.D(),
			AbandonGrace: 2 * time.Second, Logger: log, Observer: b.drainObserver(),
		}, b.store, b.writer)
		b.writer.groups[id] = s.group
	}
}

// leaseTTL is how long this instance's leases last without renewal
// (bridge.lease_ttl).
func (b *Bridge) leaseTTL() time.Duration { return b.cfg.Bridge.LeaseTTL.D() }

// openStore opens the outbox store (nil when none is configured).
func (b *Bridge) openStore() error {
	oc := b.cfg.Stores.Outbox
	if oc == nil {
		return nil
	}
	st, err := openStoreBackend(*oc)
	if err != nil {
		return fmt.Errorf("bridge: open outbox store: %w", err)
	}
	b.store = st
	b.closers = append(b.closers, st.Close)
	return nil
}

// buildReceivers constructs each receiver with its own ingest sink.
func (b *Bridge) buildReceivers(log *slog.Logger) error {
	for _, rc := range b.cfg.Receivers {
		in := &ingest{b: b, receiver: rc.ID}
		for i, r := range b.routes {
			if b.cfg.Routes[i].Receiver == rc.ID {
				in.routes = append(in.routes, r)
			}
		}
		var rcv receiver
		var err error
		if leasedSession(b.cfg, rc) {
			rcv, err = b.newGuarded(rc, in, log)
		} else {
			rcv, err = newReceiverBackend(rc, in, log)
		}
		if err != nil {
			return fmt.Errorf("bridge: receiver %s: %w", rc.ID, err)
		}
		b.metrics.initReceiver(rc.ID)
		b.receivers = append(b.receivers, namedReceiver{id: rc.ID, r: rcv})
	}
	return nil
}

var _ = stores.PartitionLease
