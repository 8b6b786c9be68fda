// Package http is a sender that delivers each message as one HTTP request (a
// webhook): the payload as the body, the envelope ID as Idempotency-Key, and
// the response status sorted into the delivery error classes.
package http

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	nethttp "net/http"
	"net/url"
	"strings"
	"time"

	"golang.org/x/net/http/httpguts"

	"github.com/gobridge/gobridge/message"
	"github.com/gobridge/gobridge/redact"
	"github.com/gobridge/gobridge/routes"
	"github.com/gobridge/gobridge/senders"
)

// Defaults for options left zero.
const (
	DefaultMethod      = nethttp.MethodPost
	DefaultTimeout     = 5 * time.Second
	DefaultContentType = "application/octet-stream"
	// DefaultMaxInFlight sizes the connection pool when New gets maxInFlight <= 0.
	DefaultMaxInFlight = 100
	// MaxHeaderValueBytes bounds a request header value that comes from the
	// message (a headers template with a placeholder, and Idempotency-Key):
	// a longer one fails that message permanently, naming the header and its
	// size; it is never truncated. 8 KiB is the header line that nginx
	// (large_client_header_buffers) and Apache (LimitRequestFieldSize) accept.
	MaxHeaderValueBytes = 8 << 10
)

// header is one configured request header with its parsed value template.
type header struct {
	name  string // canonical form
	value *message.Template
}

// Sender posts each envelope to the configured URL. It is safe for concurrent
// use; concurrent Send calls share one keep-alive connection pool.
type Sender struct {
	method  string
	url     *urlTemplate
	fixed   string // the url, when it has no placeholders: rendered once
	headers []header
	// perMessageHeaders: a header template has a placeholder, so a 431 is
	// this message's failure.
	perMessageHeaders bool
	client            *nethttp.Client
	log               *slog.Logger
}

// New builds a Sender from cfg.Options: url (required, templates allowed),
// method (default POST), headers (templates allowed), timeout (per request,
// default 5s) and tls. maxInFlight (the route's max_in_flight; <= 0:
// DefaultMaxInFlight) is how many idle connections per host are kept for
// reuse. A nil logger discards. It returns an error for a bad template, an
// unreadable TLS file, or a half-configured client certificate.
func New(cfg routes.SenderConfig, maxInFlight int, logger *slog.Logger) (*Sender, error) {
	o := cfg.Options
	if o.URL == "" {
		return nil, fmt.Errorf("http sender %q: url is required", cfg.ID)
	}
	u, err := parseURLTemplate(o.URL)
	if err != nil {
		return nil, fmt.Errorf("http sender %q: url %s: %w", cfg.ID, redact.URL(o.URL), err)
	}
	var fixed string
	if !u.perMessage() {
		f, err := u.render(&message.Envelope{}, nil)
		if err != nil {
			return nil, fmt.Errorf("http sender %q: %w", cfg.ID, err)
		}
		fixed = f.String()
	}
	method := strings.ToUpper(cmp.Or(o.Method, DefaultMethod))
	if _, err := nethttp.NewRequest(method, "http://localhost/", nil); err != nil {
		return nil, fmt.Errorf("http sender %q: method %q: %w", cfg.ID, o.Method, err)
	}
	s := &Sender{
		method: method,
		url:    u,
		fixed:  fixed,
		log:    cmp.Or(logger, slog.New(slog.DiscardHandler)).With("component", "sender", "sender", cfg.ID),
	}
	for name, v := range o.Headers {
		t, err := message.ParseTemplate(v)
		if err != nil {
			return nil, fmt.Errorf("http sender %q: header %s: %w", cfg.ID, name, err)
		}
		// net/http refuses a request whose header name is not a token or
		// whose value holds a control character: every message would fail.
		if !httpguts.ValidHeaderFieldName(name) {
			return nil, fmt.Errorf("http sender %q: header %q: not a valid header name (letters, digits and !#$%%&'*+-.^_`|~)", cfg.ID, name)
		}
		if routes.HeaderValueProblem(t) {
			return nil, fmt.Errorf("http sender %q: header %s: the value holds a control character other than tab", cfg.ID, name)
		}
		name = nethttp.CanonicalHeaderKey(name)
		if name == "Host" && !t.IsLiteral() {
			return nil, fmt.Errorf("http sender %q: header Host: %w", cfg.ID, ErrTemplatedHost)
		}
		s.headers = append(s.headers, header{name: name, value: t})
		s.perMessageHeaders = s.perMessageHeaders || !t.IsLiteral()
	}
	tlsConf, err := o.TLS.Config(false)
	if err != nil {
		return nil, fmt.Errorf("http sender %q: %w", cfg.ID, err)
	}
	if maxInFlight <= 0 {
		maxInFlight = DefaultMaxInFlight
	}
	tr := nethttp.DefaultTransport.(*nethttp.Transport).Clone()
	tr.MaxIdleConns = maxInFlight
	tr.MaxIdleConnsPerHost = maxInFlight
	// No MaxConnsPerHost: a sender shared by routes or partitions may have
	// more sends in flight than one route's max_in_flight, and a request
	// waiting for a connection would spend its timeout waiting.
	tr.TLSClientConfig = tlsConf
	tr.MaxResponseHeaderBytes = maxHeaderBytes
	s.client = &nethttp.Client{
		Transport: tr,
		Timeout:   cmp.Or(o.Timeout.D(), DefaultTimeout),
		// A webhook that redirects is misconfigured: following a 301/302
		// would turn a POST into a GET without a body. The 3xx is reported.
		CheckRedirect: func(*nethttp.Request, []*nethttp.Request) error { return nethttp.ErrUseLastResponse },
	}
	return s, nil
}

// BatchSize returns 1: one request carries one message.
func (s *Sender) BatchSize() int { return 1 }

// Close closes the idle connections of the pool. Send must not be called
// after Close.
func (s *Sender) Close() error {
	s.client.CloseIdleConnections()
	return nil
}

// Send delivers envs one request each, in order, and returns one error per
// envelope (nil: the target answered 2xx), classified as classify says; a
// message the templates cannot render is senders.Permanent.
func (s *Sender) Send(ctx context.Context, envs []*message.Envelope) []error {
	errs := make([]error, len(envs))
	for i, e := range envs {
		errs[i] = s.send(ctx, e)
	}
	return errs
}

func (s *Sender) send(ctx context.Context, e *message.Envelope) error {
	req, err := s.request(ctx, e)
	if err != nil {
		return senders.Permanent(fmt.Errorf("http: message %s: %w", clip(e.ID), err))
	}
	resp, err := s.client.Do(req)
	if err != nil {
		// Connection refused or reset, DNS, TLS handshake (an operator
		// fixes a bad certificate, not the message), timeouts and a
		// cancelled ctx: all may pass. The *url.Error is unwrapped: its text
		// holds the whole URL, secrets in the query included. The rest is
		// clipped: it may quote what the target sent (a status line, a
		// certificate's names).
		if ue, ok := errors.AsType[*url.Error](err); ok {
			err = ue.Err
		}
		return fmt.Errorf("http: %s %s: %w", s.method, redact.URL(req.URL.String()), clipped{err})
	}
	err = classify(resp, time.Now(), s.method, req.URL, s.url.sentPerMessage(), s.perMessageHeaders)
	if err != nil {
		s.log.Debug("send failed", "record_id", e.ID, "error", err)
	}
	return err
}

// request builds the request for e; an error means e cannot be sent as
// configured (a placeholder it cannot fill, a URL that does not parse or
// would leave its target).
func (s *Sender) request(ctx context.Context, e *message.Envelope) (*nethttp.Request, error) {
	var p message.ParsedPayload
	raw := s.fixed
	if raw == "" {
		u, err := s.url.render(e, &p)
		if err != nil {
			return nil, fmt.Errorf("url: %w", err)
		}
		raw = u.String()
	}
	req, err := nethttp.NewRequestWithContext(ctx, s.method, raw, bytes.NewReader(e.Payload))
	if err != nil {
		return nil, fmt.Errorf("build request for %s: %w", redact.URL(raw), errBadURL)
	}
	req.Header.Set("Content-Type", DefaultContentType) // unless a header sets it
	for _, h := range s.headers {
		v, err := h.value.Render(e, &p)
		if err != nil {
			return nil, fmt.Errorf("header %s: %w", h.name, err)
		}
		if len(v) > MaxHeaderValueBytes && !h.value.IsLiteral() {
			return nil, fmt.Errorf("header %s: the value is %d bytes, more than %d", h.name, len(v), MaxHeaderValueBytes)
		}
		if !httpguts.ValidHeaderFieldValue(v) {
			// net/http refuses the request before sending it: the message's
			// failure, not the target's.
			return nil, fmt.Errorf("header %s: the value holds a control character other than tab", h.name)
		}
		if h.name == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(h.name, v)
	}
	if req.Header.Get("User-Agent") == "" {
		req.Header.Set("User-Agent", "gobridge")
	}
	if len(e.ID) > MaxHeaderValueBytes { // idempotency_key.from can make it
		return nil, fmt.Errorf("header Idempotency-Key (the message ID): the value is %d bytes, more than %d", len(e.ID), MaxHeaderValueBytes)
	}
	if !httpguts.ValidHeaderFieldValue(e.ID) { // so can idempotency_key.from
		return nil, errors.New("header Idempotency-Key (the message ID): the value holds a control character other than tab")
	}
	req.Header.Set("Idempotency-Key", e.ID)
	return req, nil
}

// errBadURL marks a URL that does not parse or is not http(s).
var errBadURL = errors.New("bad url")

// ErrTemplatedHost is returned by New for a Host header with placeholders:
// a message must not choose the virtual host it reaches. A literal Host
// header (a fixed virtual host behind an IP address) is allowed.
var ErrTemplatedHost = errors.New("the Host header cannot come from a placeholder")

// parseURL parses raw, an http(s) URL with a host. Its errors show raw
// redacted (package redact).
func parseURL(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		if ue, ok := errors.AsType[*url.Error](err); ok {
			err = ue.Err // its text holds raw unredacted
		}
		return nil, fmt.Errorf("%w %q: %w", errBadURL, redact.URL(raw), err)
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("%w %q: want http:// or https:// with a host", errBadURL, redact.URL(raw))
	}
	if err := routes.PortProblem(u); err != nil {
		return nil, fmt.Errorf("%w %q: %w", errBadURL, redact.URL(raw), err)
	}
	return u, nil
}
