package bridge

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"maps"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gobridge/gobridge/drainer"
	"github.com/gobridge/gobridge/message"
	"github.com/gobridge/gobridge/processors"
	"github.com/gobridge/gobridge/routes"
	"github.com/gobridge/gobridge/senders"
)

// route is one configured route, ready to take messages. A reload keeps
// it while its config and its sender's stay the same.
type route struct {
	cfg    routes.RouteConfig
	id     string
	sender drainer.Sender
	health *senders.Health
	policy drainer.Policy
	chain  *processors.Chain // runs the processors and sets the ordering key
	// maxPayload is its receiver's max_payload_bytes: no transform makes more.
	maxPayload int
	session    string // where the route keeps its records (see home)
	partitions int
	dlq        bool      // failures are dead-lettered (else dropped)
	hold       *holder   // direct_hold only
	fallback   *fallback // direct_or_outbox only
	// The metrics of the route's direct sends, looked up once.
	sent        prometheus.Counter
	sendSeconds prometheus.Observer

	// busy counts the messages the route is dispatching and its direct
	// deliveries in progress; a reload waits for it before the route's
	// successor takes messages.
	busy sync.WaitGroup
	// workers counts its lanes' goroutines, which return once quit is closed.
	workers sync.WaitGroup
	// ready, when not nil (a route a reload built), is closed once the route
	// it replaces has settled what it held and its session's new drainer,
	// which knows it, runs: until then dispatch waits.
	ready chan struct{}
	// quit is closed when the route stops retrying (shutdown, or a reload
	// that gave up waiting): what it holds stays unacknowledged. ctx bounds
	// its sends: cancelled with it, or at the shutdown deadline.
	quit     chan struct{}
	quitOnce sync.Once
	ctx      context.Context
	cancel   context.CancelFunc
}

// stop ends the route's retries (see quit).
func (r *route) stop() { r.quitOnce.Do(func() { close(r.quit) }) }

// session is one outbox session and its drainer. A reload keeps it while
// its settings and its routes stay the same.
type session struct {
	id string
	sessionSettings
	members map[string]*route // by route id and previous ids
	routes  map[string]drainer.Route
	group   *drainer.Group
	run     *task // nil until started
}

type sessionSettings struct {
	partitions, batch int
	poll              drainer.Poll
	stallAfter        time.Duration
	maxLive           int
	maxBytes          int64
}

// same reports whether s is o with nothing changed.
func (s *session) same(o *session) bool {
	return o != nil && s.sessionSettings == o.sessionSettings && maps.Equal(s.members, o.members)
}

// sender is one built sender and its health, kept by a reload while its
// config and max_in_flight stay the same.
type sender struct {
	drainer.Sender
	health      *senders.Health
	cfg         routes.SenderConfig
	maxInFlight int
}

// recv is one receiver and the ingest it feeds.
type recv struct {
	id  string
	cfg routes.ReceiverConfig
	r   receiver
	in  *ingest
	run *task // nil until started
}

// homePrefix starts the session names of direct_hold routes (see home).
const homePrefix = "~"

// home says where route rc keeps its records: an outbox route in its
// session, a direct_hold route's ingest dead letters in the session "~" +
// its id (one partition).
func home(rc routes.RouteConfig) (session string, partitions int) {
	if rc.DeliveryMode == routes.DirectHold {
		return homePrefix + rc.ID, 1
	}
	return rc.Session.ID, rc.Session.Partitions
}

// ownerName names this process in leases: the bridge id and a nonce, so
// that two processes with one bridge.id never take each other's leases.
func ownerName(bridgeID string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return bridgeID + "/" + hex.EncodeToString(b[:])
}

// newSender builds one sender and its health, reported as
// gobridge_sender_up, in the log and in the journal.
func (b *Bridge) newSender(sc routes.SenderConfig, maxInFlight int) (*sender, error) {
	s, err := newSenderBackend(sc, maxInFlight, b.stdout, b.base)
	if err != nil {
		return nil, err
	}
	h := senders.NewHealth()
	id := sc.ID
	h.OnChange = func(up bool, lastErr string) {
		b.metrics.senderUp.WithLabelValues(id).Set(b2f(up))
		if up {
			b.log.Info("sender is up again", "sender", id)
		} else {
			b.log.Warn("sender is down: probing it once per backoff step", "sender", id, "error", lastErr)
		}
		b.journal.SenderState(id, up, lastErr)
	}
	return &sender{Sender: s, health: h, cfg: sc, maxInFlight: maxInFlight}, nil
}

// close closes the sender's backend, if it can be closed.
func (s *sender) close() error {
	if c, ok := s.Sender.(io.Closer); ok {
		return c.Close()
	}
	return nil
}

func (b *Bridge) newRoute(rc routes.RouteConfig, s *sender, maxPayload int) (*route, error) {
	p := rc.Policy
	r := &route{
		cfg: rc, id: rc.ID, sender: s.Sender, health: s.health,
		policy: drainer.Policy{
			MaxInFlight: p.MaxInFlight, SendTimeout: p.SendTimeout.D(),
			MaxReplayAttempts: p.MaxReplayAttempts, ReplayBudget: p.ReplayBudget.D(),
			DropExpired: p.OnExpired == routes.PolicyDrop, DropPermanent: p.OnPermanentFailure == routes.PolicyDrop,
			Backoff: drainer.Backoff{Initial: p.Backoff.InitialInterval.D(), Max: p.Backoff.MaxInterval.D(), Multiplier: p.Backoff.Multiplier},
		},
		maxPayload: maxPayload, dlq: p.OnPermanentFailure == routes.PolicyDLQ && b.store != nil, quit: make(chan struct{}),
	}
	ch, err := processors.Compile(rc, maxPayload)
	if err != nil {
		return nil, fmt.Errorf("bridge: route %s: compile processors: %w", rc.ID, err)
	}
	r.chain = ch
	r.session, r.partitions = home(rc)
	mode := rc.DeliveryMode
	if mode != routes.SharedOutbox {
		r.sent, r.sendSeconds = b.metrics.sent.WithLabelValues(rc.ID), b.metrics.sendSeconds.WithLabelValues(rc.ID)
	}
	switch mode {
	case routes.SharedOutbox, routes.DirectOrOutbox:
		if b.store == nil || rc.Session.ID == "" {
			return nil, fmt.Errorf("bridge: route %s: %s needs stores.outbox and session.id", rc.ID, mode)
		}
		if mode == routes.DirectOrOutbox {
			r.fallback = newFallback(b, r)
		}
	case routes.DirectHold:
		r.hold = &holder{b: b, r: r, lanes: newLanes(r, b.metrics.inFlight.WithLabelValues(r.id)), started: map[*message.Envelope]time.Time{}}
	default:
		return nil, fmt.Errorf("bridge: route %s: unknown delivery_mode %q", rc.ID, mode)
	}
	r.ctx, r.cancel = context.WithCancel(b.holdCtx)
	return r, nil
}

// addToSession registers r with its home session in p (creating it).
func (b *Bridge) addToSession(p *parts, r *route) {
	rc := r.cfg
	s := p.sessions[r.session]
	if s == nil {
		s = &session{id: r.session, sessionSettings: sessionSettings{partitions: r.partitions, batch: routes.DefaultSessionBatchSize,
			poll: drainer.Poll{Min: time.Second, Max: 30 * time.Second, Multiplier: 2}, stallAfter: rc.Policy.StallAfter.D(),
			maxLive: rc.Policy.MaxOutboxDepth, maxBytes: rc.Policy.MaxOutboxBytes},
			members: map[string]*route{}, routes: map[string]drainer.Route{}}
		if rc.UsesOutbox() {
			s.batch = rc.Session.BatchSize
			if ds := rc.Session.DrainStrategy; ds.Type == routes.DrainAdaptiveBackoff {
				s.poll = drainer.Poll{Min: ds.MinInterval.D(), Max: ds.MaxInterval.D(), Multiplier: ds.Multiplier}
			} else {
				s.poll = drainer.Poll{Min: ds.Interval.D(), Max: ds.Interval.D()}
			}
		}
		p.sessions[r.session] = s
	}
	// A session is held to the tightest of its routes' settings.
	s.stallAfter = min(s.stallAfter, rc.Policy.StallAfter.D())
	s.maxLive = min(s.maxLive, rc.Policy.MaxOutboxDepth)
	s.maxBytes = min(s.maxBytes, rc.Policy.MaxOutboxBytes)
	prep := func(env *message.Envelope) (bool, error) {
		res, err := r.chain.Process(env)
		return res.Drop, err
	}
	dr := drainer.Route{
		Sender: r.sender, Health: r.health, Policy: r.policy, Prepare: prep,
		DeadFull: func() bool { return b.limits.deadFull(r.id) },
	}
	for _, id := range append([]string{r.id}, rc.PreviousIDs...) {
		s.routes[id] = dr
		s.members[id] = r
	}
}

func (b *Bridge) newGroup(s *session) {
	s.group = drainer.New(drainer.Options{
		Session: s.id, Partitions: s.partitions, BatchSize: s.batch,
		Window: max(4*s.batch, 1024), Poll: s.poll, Routes: s.routes,
		Owner: b.owner, LeaseTTL: b.cfg.Bridge.LeaseTTL.D(), ShutdownTimeout: b.cfg.Bridge.ShutdownTimeout.D(),
		AbandonGrace: 2 * time.Second, Logger: b.base, Observer: &observer{b: b, s: s},
	}, b.store, b.writer)
}

// newRecv builds a receiver with its own ingest sink: a guarded one when
// its MQTT session is leased.
func (b *Bridge) newRecv(rc routes.ReceiverConfig) (*recv, error) {
	in := &ingest{b: b, receiver: rc.ID}
	var rcv receiver
	var err error
	if leasedSession(b.cfg, rc) {
		rcv, err = b.newGuarded(rc, in, b.base)
	} else {
		rcv, err = newReceiverBackend(rc, in, b.base)
	}
	if err != nil {
		return nil, fmt.Errorf("bridge: receiver %s: %w", rc.ID, err)
	}
	return &recv{id: rc.ID, cfg: rc, r: rcv, in: in}, nil
}
