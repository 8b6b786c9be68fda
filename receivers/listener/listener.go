// Package listener is the receiver that embeds an MQTT broker (mochi-mqtt):
// publishers connect to gobridge itself.
//
// mochi's OnPublish hook runs in the publisher's read loop, so messages
// reach the sink in the order each publisher sent them, and queues every
// PUBLISH on its connection's receivers.Acker, so acknowledgements go back
// in arrival order whatever became of each message: routed (handed to the
// sink, acknowledged after done; truncated when over max_payload_bytes,
// MQTT 5 reason 0x95), unrouted (no topic matches) or denied by the
// client's publish ACL or sent to a reserved topic ($SYS/...; discarded,
// MQTT 5 reason 0x87), the last two
// acknowledged in turn and counted.
//
// QoS 0 and 1: the hook returns packets.ErrRejectPacket, so mochi neither
// acknowledges nor routes; the acker writes the PUBACK, then re-publishes
// the message to the embedded subscribers through mochi's inline client.
// QoS 2: the hook waits for the acker and returns; mochi then writes the
// PUBREC, so one QoS 2 message per publisher is in flight at a time.
// Rejection is the only safe way to withhold an acknowledgement: mochi
// acknowledges an MQTT 3.1.1 client whatever else OnPublish returns.
//
// When Run's ctx is done before a message is settled, the publisher's
// connection is closed without an acknowledgement: the publisher sends it
// again after reconnecting.
package listener

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	mochi "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/gobridge/gobridge/receivers"
)

// Defaults New applies to zero Options fields.
const (
	DefaultListen         = "127.0.0.1:1883"
	DefaultMaxClients     = 1024
	DefaultConnectTimeout = 10 * time.Second
	DefaultSessionExpiry  = time.Hour
)

// PacketOverhead is what the hard packet limit allows beyond
// MaxPayloadBytes: a 64 KiB topic, properties and headers.
const PacketOverhead = 66560

// WriteTimeout bounds each write to a client (a packet: an acknowledgement,
// a message to a subscriber); a client that does not take it in time, by
// not reading, is disconnected.
const WriteTimeout = 30 * time.Second

// PublisherWindow is how many messages of one publisher connection may be
// unacknowledged. When it is full (or the receiver's MaxInflightBytes is
// reached), mochi's read loop for that publisher waits: TCP flow control
// holds the publisher back.
const PublisherWindow = 1024

var (
	// ErrConfig is wrapped by every configuration error New returns.
	ErrConfig = errors.New("mqtt listener: invalid configuration")
	// ErrAlreadyRun is returned by a second call to Run.
	ErrAlreadyRun = errors.New("mqtt listener: Run called twice")
	// errShutdown is the stop cause of a publisher whose message could
	// not be settled before the listener stopped.
	errShutdown = errors.New("mqtt listener: stopping before the message was settled")
)

// Options configure a Listener. Zero fields take the defaults named.
type Options struct {
	// ID names the receiver in messages and logs. Required.
	ID string
	// Listen is the TCP address; defaults to DefaultListen.
	Listen string
	// Topics are the filters whose messages go to the sink. At least one.
	Topics []string
	// TLS, when set, makes the listener TLS-only. With ClientAuth
	// tls.RequireAndVerifyClientCert, a client that sends no username is
	// identified by its certificate's common name: the user of that name,
	// or the default ACL when there is none.
	TLS *tls.Config
	// Users may connect with their password.
	Users []User
	// AllowAnonymous lets clients that send no username (and present no
	// certificate) connect, under the Anonymous ACL. Without it they are
	// accepted only on a loopback Listen with no Users.
	AllowAnonymous bool
	Anonymous      ACL
	// MaxPayloadBytes: a larger payload reaches the sink truncated and is
	// then acknowledged (MQTT 5: PUBACK 0x95). A packet larger than
	// MaxPayloadBytes + PacketOverhead is refused before it is read, and
	// its connection closed; MQTT 5 clients are told the limit in the
	// CONNACK. Defaults to receivers.DefaultMaxPayloadBytes.
	MaxPayloadBytes int
	// MaxInflightBytes bounds the payload and topic bytes unacknowledged across all
	// publishers, and (as MaxInflightBytes / MaxPayloadBytes messages,
	// 16..65535) what the broker queues per subscriber. Defaults to
	// receivers.DefaultMaxInflightBytes.
	MaxInflightBytes int
	// MaxClients bounds the open connections; one more is closed at once.
	// Defaults to DefaultMaxClients.
	MaxClients int
	// ConnectTimeout is how long a connection may take to send its
	// CONNECT (and finish its TLS handshake); defaults to
	// DefaultConnectTimeout.
	ConnectTimeout time.Duration
	// Retain keeps retained messages; false strips the retain flag of
	// every publication and will.
	Retain bool
	// SessionExpiry caps how long a disconnected persistent session is
	// kept; defaults to DefaultSessionExpiry.
	SessionExpiry time.Duration
}

// User is one account.
type User struct {
	Username string
	// Password is compared in constant time, PasswordHash is a bcrypt
	// hash; set one. With neither, the user connects only with a client
	// certificate whose common name is Username.
	Password, PasswordHash string
	ACL
}

// ACL lists the topic filters a client may publish to and subscribe to. A
// nil Publish defaults to the listener's Topics; a nil Subscribe allows no
// subscription.
type ACL struct {
	Publish, Subscribe []string
}

// Listener is an embedded MQTT broker. Create it with New; it is safe for
// concurrent use.
type Listener struct {
	o       Options
	access  atomic.Pointer[access] // SetUsers replaces it
	sink    receivers.Sink
	log     *slog.Logger
	base    *slog.Logger // without the component key, for mochi's logger
	win     *receivers.Window
	ran     atomic.Bool
	ready   chan struct{}
	addr    atomic.Pointer[net.Addr]
	status  atomic.Pointer[receivers.Status]
	refused atomic.Uint64 // connections refused (authentication, will ACL)
	dropped atomic.Uint64 // sessions dropped by dropOldestSession

	// running counts the ackers' Run calls, which Run waits for after the
	// server closed (with every connection and hook: see netListener).
	running sync.WaitGroup
	mu      sync.Mutex
	ackers  map[*mochi.Client]*pubAcker // under mu: one per publisher connection
	claims  map[string]*mochi.Client    // under mu: client IDs authenticated, session not yet registered
	srv     *mochi.Server               // set by Run before it serves
	ctx     context.Context             // Run's ctx, set before the server starts

	// Tests: extraHooks are added to the server after the listener's own;
	// wrapListener wraps the TCP listener.
	extraHooks   []mochi.Hook
	wrapListener func(net.Listener) net.Listener
	writeTimeout time.Duration // defaults to WriteTimeout
}

// pubAcker is the acker of one publisher connection; its ctx ends when the
// connection closes (or OnDisconnect runs) or with Run. The sink gets it,
// so a message whose route pushes back lets go of its connection.
type pubAcker struct {
	*receivers.Acker
	ctx    context.Context
	cancel context.CancelFunc
}

// New validates o and builds a listener that hands messages to sink. It
// does not listen: Run does. Errors wrap ErrConfig. A nil logger discards.
func New(o Options, sink receivers.Sink, logger *slog.Logger) (*Listener, error) {
	if sink == nil {
		return nil, fmt.Errorf("%w: nil sink", ErrConfig)
	}
	if o.ID == "" || len(o.Topics) == 0 {
		return nil, fmt.Errorf("%w: receiver %q needs an ID and topics", ErrConfig, o.ID)
	}
	o.Listen = cmp.Or(o.Listen, DefaultListen)
	o.MaxPayloadBytes = cmp.Or(o.MaxPayloadBytes, receivers.DefaultMaxPayloadBytes)
	o.MaxInflightBytes = cmp.Or(o.MaxInflightBytes, receivers.DefaultMaxInflightBytes)
	o.MaxClients = cmp.Or(o.MaxClients, DefaultMaxClients)
	o.ConnectTimeout = cmp.Or(o.ConnectTimeout, DefaultConnectTimeout)
	o.SessionExpiry = cmp.Or(o.SessionExpiry, DefaultSessionExpiry)
	acc, err := newAccess(o)
	if err != nil {
		return nil, err
	}
	base := cmp.Or(logger, slog.New(slog.DiscardHandler)).With("receiver", o.ID)
	l := &Listener{
		o: o, sink: sink, base: base,
		log:   base.With("component", "receiver"),
		win:   receivers.NewWindow(o.MaxInflightBytes),
		ready: make(chan struct{}),
	}
	l.access.Store(acc)
	l.status.Store(&receivers.Status{Reason: "not listening yet"})
	return l, nil
}

// SetUsers replaces the users, the anonymous ACL and AllowAnonymous while
// the listener runs (a config reload), validated as New does; on error
// nothing changes. The new ACLs apply from the next PUBLISH or SUBSCRIBE on,
// to wills (a connected client's will that its new ACL refuses is dropped)
// and to what sessions hold queued (dropped when the new ACL refuses it). A client is disconnected, to authenticate again, only when its
// user was removed or its password changed, or anonymous access ended (a
// CONNECT in progress included); its will is dropped.
func (l *Listener) SetUsers(users []User, anonymous ACL, allowAnonymous bool) error {
	o := l.o
	o.Users, o.Anonymous, o.AllowAnonymous = users, anonymous, allowAnonymous
	acc, err := newAccess(o)
	if err != nil {
		return err
	}
	select {
	case <-l.ready: // l.srv is set
	default:
		l.access.Store(acc)
		return nil
	}
	l.mu.Lock() // see OnConnectAuthenticate
	was := l.access.Swap(acc)
	clients := slices.Collect(maps.Values(l.claims))
	l.mu.Unlock()
	for _, cl := range append(clients, slices.Collect(maps.Values(l.srv.Clients.GetAll()))...) {
		if cl.Net.Inline {
			continue
		}
		id := string(cl.Properties.Username)
		if n := l.dropQueued(cl, acc.acl(id)); n > 0 {
			l.log.Info("queued messages dropped: the client's subscribe ACL no longer allows them", "username", id, "client", cl.ID, "count", n)
		}
		if cl.Closed() {
			continue
		}
		old, now := was.users[id], acc.users[id]
		gone := id == "" && !acc.anonymous ||
			old != nil && (now == nil || now.Password != old.Password || now.PasswordHash != old.PasswordHash)
		if gone {
			l.log.Info("disconnecting a client whose credentials changed", "username", id, "remote", cl.Net.Remote)
			_ = l.srv.DisconnectClient(cl, packets.ErrNotAuthorized)
		}
	}
	return nil
}

// dropQueued drops the messages queued for cl (a persistent session while
// its client is away; messages not yet acknowledged) on topics acl does not
// let it subscribe to, as a SetUsers narrowed it, and returns how many.
// Those with a topic alias for a topic are kept: the topic is not known.
func (l *Listener) dropQueued(cl *mochi.Client, acl *ACL) (n int) {
	for _, pk := range cl.State.Inflight.GetAll(false) {
		if pk.FixedHeader.Type == packets.Publish && pk.TopicName != "" && !acl.maySubscribe(pk.TopicName) &&
			cl.State.Inflight.Delete(pk.PacketID) {
			cl.State.Inflight.IncreaseSendQuota()
			atomic.AddInt64(&l.srv.Info.Inflight, -1)
			n++
		}
	}
	return n
}

// Run listens and serves publishers until ctx is done, then closes every
// connection (unsettled messages are not acknowledged), waits for the hooks
// in progress and returns nil. It returns an error only when it cannot
// listen. Run may be called once.
func (l *Listener) Run(ctx context.Context) error {
	if !l.ran.CompareAndSwap(false, true) {
		return ErrAlreadyRun
	}
	l.ctx = ctx

	caps := mochi.NewDefaultServerCapabilities()
	perSubscriber := uint16(min(max(l.o.MaxInflightBytes/l.o.MaxPayloadBytes, 16), 65535))
	caps.MaximumInflight = perSubscriber
	caps.MaximumClientWritesPending = int32(perSubscriber)
	caps.ReceiveMaximum = 65535
	caps.MaximumPacketSize = uint32(l.o.MaxPayloadBytes + PacketOverhead)
	caps.MaximumSessionExpiryInterval = uint32(l.o.SessionExpiry / time.Second)
	// No inbound topic aliases (the CONNACK announces none): mochi would
	// keep up to 65535 of them a connection, topics of up to 64 KiB that no
	// limit counts. An alias is a protocol error that closes the connection.
	caps.TopicAliasMaximum = 0
	srv := mochi.New(&mochi.Options{
		Capabilities: caps,
		Logger:       l.base.With("component", "mochi"),
		InlineClient: true, // routes settled messages to embedded subscribers
	})
	l.srv = srv
	l.ackers = make(map[*mochi.Client]*pubAcker)
	l.claims = make(map[string]*mochi.Client)
	for _, h := range append([]mochi.Hook{&hook{l: l}}, l.extraHooks...) {
		if err := srv.AddHook(h, nil); err != nil {
			return fmt.Errorf("add hook %s: %w", h.ID(), err)
		}
	}

	ln, err := net.Listen("tcp", l.o.Listen)
	if err != nil {
		l.status.Store(&receivers.Status{Reason: fmt.Sprintf("listen on %s: %v", l.o.Listen, err)})
		return fmt.Errorf("listen on %s: %w", l.o.Listen, err)
	}
	addr := ln.Addr()
	if l.wrapListener != nil {
		ln = l.wrapListener(ln)
	}
	if l.o.TLS != nil {
		ln = tls.NewListener(ln, l.o.TLS)
	}
	nl := &netListener{
		id: l.o.ID, ln: ln, srv: srv, log: l.log, maxConns: l.o.MaxClients, connectTimeout: l.o.ConnectTimeout,
		writeTimeout: cmp.Or(l.writeTimeout, WriteTimeout),
	}
	if err := srv.AddListener(nl); err != nil {
		ln.Close()
		return fmt.Errorf("add listener: %w", err)
	}
	if err := srv.Serve(); err != nil {
		srv.Close()
		return fmt.Errorf("serve mqtt: %w", err)
	}
	l.addr.Store(&addr)
	l.status.Store(&receivers.Status{Connected: true, Subscribed: true})
	close(l.ready)
	l.log.Info("listening", "address", addr.String(), "tls", l.o.TLS != nil, "anonymous", l.access.Load().anonymous,
		"max_packet_bytes", caps.MaximumPacketSize, "max_clients", l.o.MaxClients)

	<-ctx.Done()
	srv.Close()
	l.running.Wait()
	l.status.Store(&receivers.Status{Reason: "stopped"})
	l.log.Info("stopped")
	return nil
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
func (l *Listener) Status() receivers.Status { return *l.status.Load() }

// Stats returns the listener's counters.
func (l *Listener) Stats() receivers.Stats { return l.win.Stats() }

// acker returns the publisher connection's acker, starting it on first use.
func (l *Listener) acker(cl *mochi.Client) *pubAcker {
	l.mu.Lock()
	defer l.mu.Unlock()
	a, ok := l.ackers[cl]
	if !ok {
		a = &pubAcker{Acker: l.win.NewAcker(PublisherWindow)}
		a.ctx, a.cancel = context.WithCancel(l.ctx)
		l.ackers[cl] = a
		l.running.Go(func() { a.Run(a.ctx) })
		if tc, ok := cl.Net.Conn.(*trackedConn); ok {
			// The connection may close while its read loop waits in
			// OnPublish, before OnDisconnect can run.
			l.running.Go(func() {
				select {
				case <-tc.closed:
					a.cancel()
				case <-a.ctx.Done():
				}
			})
		}
	}
	return a
}
