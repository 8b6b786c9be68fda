// Package listener is the receiver that embeds an MQTT broker (mochi-mqtt):
// publishers connect to gobridge itself.
//
// A PUBLISH whose topic matches one of the receiver's topics is handed to
// the sink from mochi's OnPublish hook, in the publisher's read loop, so
// messages reach the sink in the order each publisher sent them.
//
//   - QoS 0 and 1: the hook queues the message on a per-connection acker
//     (at most PublisherWindow unsettled; then the read loop waits and TCP
//     holds the publisher back), hands it to the sink and returns
//     packets.ErrRejectPacket, so mochi writes no PUBACK and routes
//     nothing. The acker writes the PUBACK itself once done was called for
//     that message and every earlier one of the same connection (arrival
//     order, MQTT 3.1.1 §4.6), then routes the message to the embedded
//     broker's subscribers through mochi's inline client. The hook ignores
//     the inline client, so nothing is ingested twice.
//   - QoS 2: the hook waits for done and returns; mochi then writes the
//     PUBREC (after OnPublish returns) and runs PUBREL/PUBCOMP. One QoS 2
//     message per publisher is in flight at a time.
//
// Messages on topics that match none of the receiver's topics are accepted
// and routed to the embedded broker's subscribers only (counted as
// Unrouted): they never reach the sink.
//
// When Run's ctx is done before a message is settled, the publisher's
// connection is closed and no PUBACK is sent for it: the publisher sends it
// again after reconnecting. (mochi ignores any OnPublish error other than
// ErrRejectPacket/CodeSuccessIgnore for an MQTT 3.1.1 client and PUBACKs
// anyway, so rejection is the only safe way to withhold the PUBACK.)
package listener

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"

	mochi "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/gobridge/gobridge/receivers"
	"github.com/gobridge/gobridge/routes"
)

// DefaultListen is the address New uses when options.listen is empty.
const DefaultListen = "127.0.0.1:1883"

// MaxInflight is the value of mochi's MaximumInflight,
// MaximumClientWritesPending and ReceiveMaximum: its defaults (8192) drop
// QoS 1 messages to slow subscribers under load; 65535 is the ceiling.
const MaxInflight = 65535

var (
	// ErrConfig is wrapped by every configuration error New returns.
	ErrConfig = errors.New("mqtt listener: invalid configuration")
	// ErrAlreadyRun is returned by a second call to Run.
	ErrAlreadyRun = errors.New("mqtt listener: Run called twice")
	// errShutdown is the stop cause of a publisher whose message could
	// not be settled before the listener stopped.
	errShutdown = errors.New("mqtt listener: stopping before the message was settled")
)

// Listener is an embedded MQTT broker that hands matching messages to a
// sink. Create it with New; it is safe for concurrent use.
type Listener struct {
	id      string
	listen  string
	filters []string
	users   map[string]string
	tls     *tls.Config
	sink    receivers.Sink
	log     *slog.Logger

	ran   atomic.Bool
	ready chan struct{}
	addr  atomic.Pointer[net.Addr]

	// hooks counts OnPublish calls in progress and running pubAckers; Run
	// waits for them.
	hooks   sync.WaitGroup
	closing bool                        // under mu: no new hook may enter
	ackers  map[*mochi.Client]*pubAcker // under mu: one per publisher connection
	srv     *mochi.Server               // set by Run before it serves
	ctx     context.Context             // Run's ctx, set before the server starts

	received, acked, unrouted, abandoned atomic.Uint64
	inFlight                             atomic.Int64

	mu     sync.Mutex
	status receivers.Status

	// extraHooks (tests) are added to the server after the listener's own.
	extraHooks []mochi.Hook
}

// New validates cfg and builds a listener that hands messages to sink. It
// does not listen: Run does. options.listen defaults to 127.0.0.1:1883;
// options.users (none: anonymous access) and options.tls (cert_file and
// key_file: TLS only) are honoured. A nil logger discards.
func New(cfg routes.ReceiverConfig, sink receivers.Sink, logger *slog.Logger) (*Listener, error) {
	if sink == nil {
		return nil, fmt.Errorf("%w: nil sink", ErrConfig)
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if len(cfg.Topics) == 0 {
		return nil, fmt.Errorf("%w: receiver %q has no topics", ErrConfig, cfg.ID)
	}
	l := &Listener{
		id:     cfg.ID,
		listen: cmp.Or(cfg.Options.Listen, DefaultListen),
		sink:   sink,
		log:    logger.With("component", "receiver", "receiver", cfg.ID),
		ready:  make(chan struct{}),
		status: receivers.Status{Reason: "not listening yet"},
	}
	for i, t := range cfg.Topics {
		if t.Topic == "" {
			return nil, fmt.Errorf("%w: topics[%d].topic is empty", ErrConfig, i)
		}
		l.filters = append(l.filters, t.Topic)
	}
	if len(cfg.Options.Users) > 0 {
		l.users = make(map[string]string, len(cfg.Options.Users))
		for i, u := range cfg.Options.Users {
			if u.Username == "" {
				return nil, fmt.Errorf("%w: options.users[%d].username is empty", ErrConfig, i)
			}
			l.users[u.Username] = string(u.Password)
		}
	}
	t := cfg.Options.TLS
	if (t.CertFile == "") != (t.KeyFile == "") {
		return nil, fmt.Errorf("%w: tls.cert_file and tls.key_file go together", ErrConfig)
	}
	if t.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("load tls server certificate: %w", err)
		}
		l.tls = &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}}
	}
	return l, nil
}

// Run listens and serves publishers until ctx is done, then closes the
// listener and every client connection, waits for the hooks in progress
// (messages still waiting for their done are not acknowledged) and returns
// nil. It returns an error only when it cannot listen. Run may be called
// once.
func (l *Listener) Run(ctx context.Context) error {
	if !l.ran.CompareAndSwap(false, true) {
		return ErrAlreadyRun
	}
	l.ctx = ctx

	caps := mochi.NewDefaultServerCapabilities()
	caps.MaximumInflight = MaxInflight
	caps.MaximumClientWritesPending = MaxInflight
	caps.ReceiveMaximum = MaxInflight
	srv := mochi.New(&mochi.Options{
		Capabilities: caps,
		Logger:       l.log.With("component", "mochi"),
		InlineClient: true, // routes settled messages to embedded subscribers
	})
	l.srv = srv
	l.ackers = make(map[*mochi.Client]*pubAcker)
	if err := srv.AddHook(&hook{l: l}, nil); err != nil {
		return fmt.Errorf("add listener hook: %w", err)
	}
	for _, h := range l.extraHooks {
		if err := srv.AddHook(h, nil); err != nil {
			return fmt.Errorf("add hook %s: %w", h.ID(), err)
		}
	}

	ln, err := net.Listen("tcp", l.listen)
	if err != nil {
		l.setStatus(receivers.Status{Reason: fmt.Sprintf("listen on %s: %v", l.listen, err)})
		return fmt.Errorf("listen on %s: %w", l.listen, err)
	}
	addr := ln.Addr()
	if l.tls != nil {
		ln = tls.NewListener(ln, l.tls)
	}
	if err := srv.AddListener(newNetListener(l.id, ln, func(id string) { disconnectClients(srv, id) })); err != nil {
		ln.Close()
		return fmt.Errorf("add listener: %w", err)
	}
	if err := srv.Serve(); err != nil {
		srv.Close()
		return fmt.Errorf("serve mqtt: %w", err)
	}
	l.addr.Store(&addr)
	l.setStatus(receivers.Status{Connected: true, Subscribed: true})
	close(l.ready)
	l.log.Info("listening", "address", addr.String(), "tls", l.tls != nil, "anonymous", l.users == nil)

	<-ctx.Done()
	l.mu.Lock()
	l.closing = true
	l.mu.Unlock()
	srv.Close()
	l.hooks.Wait()
	l.setStatus(receivers.Status{Reason: "stopped"})
	l.log.Info("stopped")
	return nil
}

// disconnectClients tells every live client of listener id that the server is
// shutting down and closes it, like mochi's closeListenerClients but taking
// the client map's read lock once (see netListener).
func disconnectClients(srv *mochi.Server, id string) {
	for _, cl := range srv.Clients.GetAll() {
		if cl.Net.Listener == id && !cl.Closed() {
			_ = srv.DisconnectClient(cl, packets.ErrServerShuttingDown)
		}
	}
}

// Ready is closed once Run listens; Addr is valid from then on.
func (l *Listener) Ready() <-chan struct{} { return l.ready }

// Addr is the address Run listens on (useful with port 0); nil before Ready.
func (l *Listener) Addr() net.Addr {
	if p := l.addr.Load(); p != nil {
		return *p
	}
	return nil
}

// Status reports Connected and Subscribed true while the listener listens.
func (l *Listener) Status() receivers.Status {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.status
}

// Stats returns the listener's counters.
func (l *Listener) Stats() receivers.Stats {
	return receivers.Stats{
		Received:  l.received.Load(),
		Acked:     l.acked.Load(),
		Unrouted:  l.unrouted.Load(),
		Abandoned: l.abandoned.Load(),
		InFlight:  int(l.inFlight.Load()),
	}
}

func (l *Listener) setStatus(s receivers.Status) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.status = s
}

// acker returns the publisher connection's pubAcker, starting it on first
// use; nil once Run is stopping.
func (l *Listener) acker(cl *mochi.Client) *pubAcker {
	l.mu.Lock()
	defer l.mu.Unlock()
	if a, ok := l.ackers[cl]; ok {
		return a
	}
	if l.closing {
		return nil
	}
	a := &pubAcker{l: l, srv: l.srv, cl: cl, queue: make(chan *pendingPub, PublisherWindow), gone: make(chan struct{})}
	l.ackers[cl] = a
	l.hooks.Add(1)
	go a.run(l.ctx)
	return a
}

// enter registers a hook call in progress; false once Run is stopping.
func (l *Listener) enter() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closing {
		return false
	}
	l.hooks.Add(1)
	return true
}

func (l *Listener) matches(topic string) bool {
	for _, f := range l.filters {
		if filterMatches(f, topic) {
			return true
		}
	}
	return false
}
