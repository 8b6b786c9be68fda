// Package httplistener is the receiver for producers that do not speak
// MQTT: an HTTP server whose answer is the confirm (DESIGN.md §11.6).
//
//	POST /v1/publish/{topic...}   one message; the body is the payload
//	POST /v1/publish              application/x-ndjson, one message a line
//
// A request is answered once the bridge has settled its message: 200
// {"id":..., "outcome":...} for every outcome but unrouted (404); 503 with
// Retry-After when it was not settled within SettleTimeout or MaxInFlight
// requests are open. The message may still be committed after a 503: a
// retry with the same Idempotency-Key is then absorbed by the outbox
// (EnvelopeID).
//
// Refused before the body is read: 403 for a request with an Origin header
// (a browser) or to a topic none of Topics matches, 401 without the bearer
// Token, 415 for a Content-Encoding (a body is never decompressed), 413 for
// a Content-Length over the limit. A body is read through a
// limit of max+1 bytes (413 past it), so no request holds more than the
// limit in memory.
package httplistener

import (
	"cmp"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"sync/atomic"
	"time"

	"golang.org/x/net/netutil"

	"github.com/gobridge/gobridge/receivers"
)

// Defaults New applies to zero Options fields.
const (
	DefaultListen            = "127.0.0.1:8080"
	DefaultMaxInFlight       = 256
	DefaultSettleTimeout     = 30 * time.Second
	DefaultReadHeaderTimeout = 10 * time.Second
	DefaultReadTimeout       = 30 * time.Second
	DefaultWriteTimeout      = 60 * time.Second
	DefaultMaxBatchLines     = 1000
	DefaultMaxBatchBytes     = 4 << 20
	// RetryAfter is what a 503 answer's Retry-After header says.
	RetryAfter = 5 * time.Second
	// MaxIdempotencyKey is the longest Idempotency-Key accepted, in bytes.
	MaxIdempotencyKey = 256
	// ConnsPerRequest × MaxInFlight is the most connections open at once:
	// room for idle keep-alive connections, and a bound on what clients
	// that connect and never send a request (or never read the answer) can
	// hold before the token is checked. Of those, one remote address may
	// hold at most receivers.PendingPerAddress that have not made an
	// authenticated request (any request, without a token); more are
	// closed at once.
	ConnsPerRequest = 4
)

var (
	// ErrConfig is wrapped by every configuration error New returns.
	ErrConfig = errors.New("http listener: invalid configuration")
	// ErrAlreadyRun is returned by a second call to Run.
	ErrAlreadyRun = errors.New("http listener: Run called twice")
)

// Options configure a Receiver. Zero fields take the defaults named.
type Options struct {
	// ID names the receiver in logs and is the producer identity in
	// EnvelopeID. Required.
	ID string
	// Listen is the TCP address; defaults to DefaultListen.
	Listen string
	// Topics are the filters a producer may publish to; a request to any
	// other topic is refused with 403. At least one.
	Topics []string
	// Token is the bearer token every request must carry
	// ("Authorization: Bearer TOKEN"), compared in constant time. Empty
	// only with AllowAnonymous.
	Token string
	// AllowAnonymous accepts requests without a token (Token must be
	// empty); the config check allows it on a loopback Listen only.
	AllowAnonymous bool
	// TLS, when set, serves HTTPS only.
	TLS *tls.Config
	// MaxPayloadBytes bounds one message's payload (413 past it); defaults
	// to receivers.DefaultMaxPayloadBytes.
	MaxPayloadBytes int
	// MaxInflightBytes bounds the bodies of open requests; a request waits
	// for room up to SettleTimeout (then 503). Defaults to
	// receivers.DefaultMaxInflightBytes.
	MaxInflightBytes int
	// MaxInFlight bounds the requests served at once (503 beyond);
	// defaults to DefaultMaxInFlight. The server also holds at most
	// ConnsPerRequest × MaxInFlight connections open; more wait, unaccepted,
	// until one closes (one address's unauthenticated ones are bounded
	// apart: see ConnsPerRequest).
	MaxInFlight int
	// SettleTimeout bounds how long a request waits for room and for its
	// messages to be settled (admission into a full outbox included)
	// before it is answered 503; defaults to DefaultSettleTimeout.
	SettleTimeout time.Duration
	// ReadHeaderTimeout, ReadTimeout and WriteTimeout are the server's
	// (net/http.Server); WriteTimeout must exceed SettleTimeout.
	ReadHeaderTimeout, ReadTimeout, WriteTimeout time.Duration
	// Headers names the request headers carried into each message, besides
	// Content-Type.
	Headers []string
	// MaxBatchLines and MaxBatchBytes bound one NDJSON batch (413 past
	// them). Default DefaultMaxBatchLines and DefaultMaxBatchBytes.
	MaxBatchLines, MaxBatchBytes int
}

// Receiver is the HTTP ingest server. Create it with New; it is safe for
// concurrent use.
type Receiver struct {
	o      Options
	sink   receivers.Sink
	log    *slog.Logger
	slots  chan struct{}
	win    *receivers.Window // bounds the bodies of open requests
	ran    atomic.Bool
	ready  chan struct{}
	addr   atomic.Pointer[net.Addr]
	status atomic.Pointer[receivers.Status]
}

// New validates o and builds a receiver that hands messages to sink. It
// does not listen: Run does. Errors wrap ErrConfig. A nil logger discards.
func New(o Options, sink receivers.Sink, logger *slog.Logger) (*Receiver, error) {
	if sink == nil {
		return nil, fmt.Errorf("%w: nil sink", ErrConfig)
	}
	switch {
	case o.ID == "" || len(o.Topics) == 0:
		return nil, fmt.Errorf("%w: receiver %q needs an ID and topics", ErrConfig, o.ID)
	case o.Token == "" && !o.AllowAnonymous:
		return nil, fmt.Errorf("%w: receiver %q needs a token (or AllowAnonymous)", ErrConfig, o.ID)
	case o.Token != "" && o.AllowAnonymous:
		return nil, fmt.Errorf("%w: receiver %q: a token and AllowAnonymous exclude each other", ErrConfig, o.ID)
	}
	o.Listen = cmp.Or(o.Listen, DefaultListen)
	o.MaxPayloadBytes = cmp.Or(o.MaxPayloadBytes, receivers.DefaultMaxPayloadBytes)
	o.MaxInflightBytes = cmp.Or(o.MaxInflightBytes, receivers.DefaultMaxInflightBytes)
	o.MaxInFlight = cmp.Or(o.MaxInFlight, DefaultMaxInFlight)
	o.SettleTimeout = cmp.Or(o.SettleTimeout, DefaultSettleTimeout)
	o.ReadHeaderTimeout = cmp.Or(o.ReadHeaderTimeout, DefaultReadHeaderTimeout)
	o.ReadTimeout = cmp.Or(o.ReadTimeout, DefaultReadTimeout)
	o.WriteTimeout = cmp.Or(o.WriteTimeout, DefaultWriteTimeout)
	o.MaxBatchLines = cmp.Or(o.MaxBatchLines, DefaultMaxBatchLines)
	o.MaxBatchBytes = cmp.Or(o.MaxBatchBytes, DefaultMaxBatchBytes)
	if o.MaxInflightBytes < max(o.MaxPayloadBytes, o.MaxBatchBytes) {
		return nil, fmt.Errorf("%w: receiver %q: MaxInflightBytes (%d) must hold one payload (%d) and one batch (%d)",
			ErrConfig, o.ID, o.MaxInflightBytes, o.MaxPayloadBytes, o.MaxBatchBytes)
	}
	if o.WriteTimeout <= o.SettleTimeout {
		return nil, fmt.Errorf("%w: receiver %q: WriteTimeout (%s) must exceed SettleTimeout (%s)", ErrConfig, o.ID, o.WriteTimeout, o.SettleTimeout)
	}
	o.Headers = slices.Clone(o.Headers) // the caller's config stays as written
	for i, h := range o.Headers {
		o.Headers[i] = http.CanonicalHeaderKey(h)
	}
	r := &Receiver{
		o: o, sink: sink, log: cmp.Or(logger, slog.New(slog.DiscardHandler)).With("component", "receiver", "receiver", o.ID),
		slots: make(chan struct{}, o.MaxInFlight), win: receivers.NewWindow(o.MaxInflightBytes),
		ready: make(chan struct{}),
	}
	r.status.Store(&receivers.Status{Reason: "not listening yet"})
	return r, nil
}

// Run listens and serves until ctx is done, then stops accepting, gives
// open requests a moment to be answered (their contexts end with ctx: those
// still waiting for a settlement get 503) and returns nil. It returns an
// error only when it cannot listen or serve. Run may be called once.
func (r *Receiver) Run(ctx context.Context) error {
	if !r.ran.CompareAndSwap(false, true) {
		return ErrAlreadyRun
	}
	ln, err := net.Listen("tcp", r.o.Listen)
	if err != nil {
		r.status.Store(&receivers.Status{Reason: fmt.Sprintf("listen on %s: %v", r.o.Listen, err)})
		return fmt.Errorf("listen on %s: %w", r.o.Listen, err)
	}
	addr := ln.Addr()
	ln = &receivers.PendingListener{Listener: netutil.LimitListener(ln, ConnsPerRequest*r.o.MaxInFlight), Log: r.log,
		Admitted: "an authenticated request"}
	if r.o.TLS != nil {
		ln = tls.NewListener(ln, r.o.TLS)
	}
	srv := &http.Server{
		Handler:           r,
		ReadHeaderTimeout: r.o.ReadHeaderTimeout,
		ReadTimeout:       r.o.ReadTimeout,
		WriteTimeout:      r.o.WriteTimeout,
		MaxHeaderBytes:    64 << 10,
		BaseContext:       func(net.Listener) context.Context { return ctx },
		ConnContext:       receivers.PendingConnContext,
		ErrorLog:          slog.NewLogLogger(r.log.Handler(), slog.LevelWarn),
	}
	r.addr.Store(&addr)
	r.status.Store(&receivers.Status{Connected: true, Subscribed: true})
	close(r.ready)
	r.log.Info("listening", "address", addr.String(), "tls", r.o.TLS != nil, "anonymous", r.o.Token == "",
		"max_payload_bytes", r.o.MaxPayloadBytes, "max_in_flight", r.o.MaxInFlight)

	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err = <-served:
	case <-ctx.Done():
		// Requests see ctx end and answer at once; a second bounds the rest.
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		_ = srv.Shutdown(sctx)
		cancel()
		_ = srv.Close()
		err = <-served
	}
	r.status.Store(&receivers.Status{Reason: "stopped"})
	r.log.Info("stopped")
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return fmt.Errorf("serve http: %w", err)
}

// Ready is closed once Run listens; Addr is valid from then on.
func (r *Receiver) Ready() <-chan struct{} { return r.ready }

// Addr is the address Run listens on (useful with port 0); nil before Ready.
func (r *Receiver) Addr() net.Addr {
	if p := r.addr.Load(); p != nil {
		return *p
	}
	return nil
}

// Status reports Connected and Subscribed true while the receiver listens.
func (r *Receiver) Status() receivers.Status { return *r.status.Load() }

// Stats returns the receiver's counters: Acked counts messages answered as
// settled, Abandoned those answered 503 because they were not settled in
// time; the others count refused requests or batch lines.
func (r *Receiver) Stats() receivers.Stats { return r.win.Stats() }

// EnvelopeID is the envelope ID of a message published with an
// Idempotency-Key: the hex SHA-256 of the receiver's ID (one token per
// receiver), the topic and the key, each preceded by its length (8 bytes,
// big-endian), so the same key on another topic or receiver differs.
func EnvelopeID(receiver, topic, key string) string {
	h := sha256.New()
	for _, s := range []string{receiver, topic, key} {
		_ = binary.Write(h, binary.BigEndian, uint64(len(s)))
		_, _ = io.WriteString(h, s)
	}
	return hex.EncodeToString(h.Sum(nil))
}
