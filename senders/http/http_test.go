package http

import (
	"context"
	"errors"
	"io"
	"net"
	nethttp "net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gobridge/gobridge/message"
	"github.com/gobridge/gobridge/routes"
	"github.com/gobridge/gobridge/senders"
)

type seen struct {
	method, path, body string
	header             nethttp.Header
}

// recorder is an httptest server that records requests and answers with
// the given handler.
func recorder(t *testing.T, h nethttp.HandlerFunc) (*httptest.Server, chan seen) {
	t.Helper()
	got := make(chan seen, 100)
	srv := httptest.NewServer(nethttp.HandlerFunc(func(w nethttp.ResponseWriter, r *nethttp.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- seen{method: r.Method, path: r.URL.Path, body: string(b), header: r.Header.Clone()}
		h(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv, got
}

func newSender(t *testing.T, o routes.SenderOptions) *Sender {
	t.Helper()
	s, err := New(routes.SenderConfig{ID: "test", Type: routes.SenderHTTP, Options: o}, 4, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func envelope(payload string) *message.Envelope {
	return &message.Envelope{
		ID:         message.NewID(),
		Topic:      "factory/line-7/telemetry",
		Payload:    []byte(payload),
		Headers:    map[string]string{"site": "north"},
		ReceivedAt: time.Now(),
	}
}

func sendOne(t *testing.T, s *Sender, e *message.Envelope) error {
	t.Helper()
	errs := s.Send(t.Context(), []*message.Envelope{e})
	if len(errs) != 1 {
		t.Fatalf("Send returned %d errors for 1 envelope", len(errs))
	}
	return errs[0]
}

func TestSender_RequestCarriesPayloadTemplatesAndIdempotencyKey(t *testing.T) {
	srv, got := recorder(t, func(w nethttp.ResponseWriter, r *nethttp.Request) { w.WriteHeader(nethttp.StatusAccepted) })
	s := newSender(t, routes.SenderOptions{
		URL:     srv.URL + "/ingest/{topic.1}/{payload.kind}",
		Headers: map[string]string{"x-site": "{header.site}", "Authorization": "Bearer abc"},
	})
	e := envelope(`{"kind":"temp","v":1}`)
	if err := sendOne(t, s, e); err != nil {
		t.Fatal(err)
	}
	r := <-got
	checks := map[string][2]string{
		"method":          {r.method, "POST"},
		"path":            {r.path, "/ingest/line-7/temp"},
		"body":            {r.body, `{"kind":"temp","v":1}`},
		"Idempotency-Key": {r.header.Get("Idempotency-Key"), e.ID},
		"Content-Type":    {r.header.Get("Content-Type"), "application/octet-stream"},
		"X-Site":          {r.header.Get("X-Site"), "north"},
		"Authorization":   {r.header.Get("Authorization"), "Bearer abc"},
	}
	for name, c := range checks {
		if c[0] != c[1] {
			t.Errorf("%s = %q, want %q", name, c[0], c[1])
		}
	}
}

func TestSender_ContentTypeAndMethodFromConfig(t *testing.T) {
	srv, got := recorder(t, func(w nethttp.ResponseWriter, r *nethttp.Request) {})
	s := newSender(t, routes.SenderOptions{URL: srv.URL, Method: "put", Headers: map[string]string{"content-type": "application/json"}})
	if err := sendOne(t, s, envelope(`{}`)); err != nil {
		t.Fatal(err)
	}
	r := <-got
	if r.method != "PUT" || r.header.Get("Content-Type") != "application/json" || len(r.header.Values("Content-Type")) != 1 {
		t.Errorf("method %s, Content-Type %q", r.method, r.header.Values("Content-Type"))
	}
}

func TestSender_StatusClasses(t *testing.T) {
	longBody := strings.Repeat("b", 2000)
	cases := []struct {
		status     int
		header     map[string]string
		body       string
		want       senders.Class
		retryAfter time.Duration
	}{
		{status: 200, want: senders.OK},
		{status: 201, want: senders.OK},
		{status: 204, want: senders.OK},
		{status: 429, header: map[string]string{"Retry-After": "7"}, want: senders.Saturated, retryAfter: 7 * time.Second},
		{status: 429, want: senders.Saturated},
		{status: 503, header: map[string]string{"Retry-After": "120"}, want: senders.Saturated, retryAfter: 2 * time.Minute},
		{status: 408, want: senders.Transient},
		{status: 500, body: "boom", want: senders.Transient},
		{status: 502, want: senders.Transient},
		{status: 504, want: senders.Transient},
		// The message's failures (DESIGN.md §11.3): settled at once.
		{status: 400, body: `{"error":"bad field"}`, want: senders.Fatal},
		{status: 413, body: longBody, want: senders.Fatal},
		{status: 415, want: senders.Fatal},
		{status: 422, want: senders.Fatal},
		// The target's failures: retried, however many messages wait.
		{status: 401, want: senders.Transient},
		{status: 403, want: senders.Transient},
		{status: 404, want: senders.Transient}, // a fixed URL: the endpoint is gone, not the message
		{status: 405, want: senders.Transient},
		{status: 407, want: senders.Transient},
		{status: 410, want: senders.Transient},
		{status: 301, header: map[string]string{"Location": "/elsewhere"}, want: senders.Transient},
	}
	for _, c := range cases {
		t.Run(nethttp.StatusText(c.status), func(t *testing.T) {
			srv, _ := recorder(t, func(w nethttp.ResponseWriter, r *nethttp.Request) {
				for k, v := range c.header {
					w.Header().Set(k, v)
				}
				w.WriteHeader(c.status)
				io.WriteString(w, c.body)
			})
			err := sendOne(t, newSender(t, routes.SenderOptions{URL: srv.URL}), envelope("x"))
			class, ra := senders.Classify(err)
			if class != c.want || ra != c.retryAfter {
				t.Fatalf("status %d: class %v retry-after %v (%v), want %v %v", c.status, class, ra, err, c.want, c.retryAfter)
			}
			if c.want == senders.OK {
				return
			}
			var se *StatusError
			if !errors.As(err, &se) || se.Status != c.status {
				t.Fatalf("error %v is not a *StatusError with status %d", err, c.status)
			}
			wantBody := c.body
			if len(wantBody) > BodyInReason {
				wantBody = wantBody[:BodyInReason]
			}
			if se.Body != wantBody || !strings.Contains(err.Error(), wantBody) {
				t.Errorf("body in reason = %q (len %d), want %d bytes", se.Body, len(se.Body), len(wantBody))
			}
			if c.status == 301 && se.Location != "/elsewhere" {
				t.Errorf("Location = %q", se.Location)
			}
		})
	}
}

func TestSender_RetryAfterHTTPDate(t *testing.T) {
	srv, _ := recorder(t, func(w nethttp.ResponseWriter, r *nethttp.Request) {
		w.Header().Set("Retry-After", time.Now().Add(90*time.Second).UTC().Format(nethttp.TimeFormat))
		w.WriteHeader(nethttp.StatusServiceUnavailable)
	})
	err := sendOne(t, newSender(t, routes.SenderOptions{URL: srv.URL}), envelope("x"))
	class, ra := senders.Classify(err)
	if class != senders.Saturated || ra < 85*time.Second || ra > 90*time.Second {
		t.Fatalf("class %v retry-after %v, want capacity ~90s (%v)", class, ra, err)
	}
}

func TestRetryAfter(t *testing.T) {
	now := time.Date(2015, 10, 21, 7, 27, 30, 0, time.UTC)
	cases := map[string]time.Duration{
		"":                                  0,
		"0":                                 0,
		"-5":                                0,
		"30":                                30 * time.Second,
		" 2 ":                               2 * time.Second,
		"999999999":                         24 * time.Hour,
		"Wed, 21 Oct 2015 07:28:00 GMT":     30 * time.Second,
		"Wed, 21 Oct 2015 07:27:00 GMT":     0,
		"Wednesday, 21-Oct-15 07:28:00 GMT": 30 * time.Second,
		"soon":                              0,
	}
	for in, want := range cases {
		if got := RetryAfter(in, now); got != want {
			t.Errorf("RetryAfter(%q) = %v, want %v", in, got, want)
		}
	}
}

func TestSender_TimeoutIsTransient(t *testing.T) {
	release := make(chan struct{})
	srv, _ := recorder(t, func(w nethttp.ResponseWriter, r *nethttp.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	})
	defer close(release)
	s := newSender(t, routes.SenderOptions{URL: srv.URL, Timeout: routes.Duration(50 * time.Millisecond)})
	err := sendOne(t, s, envelope("x"))
	var ne net.Error
	if class, _ := senders.Classify(err); class != senders.Transient || !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("class %v, err %v: want a transient timeout", class, err)
	}
}

func TestSender_ConnectionRefusedIsTransient(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	err = sendOne(t, newSender(t, routes.SenderOptions{URL: "http://" + addr + "/x"}), envelope("x"))
	var oe *net.OpError
	if class, _ := senders.Classify(err); class != senders.Transient || !errors.As(err, &oe) {
		t.Fatalf("class %v, err %v: want a transient dial error", class, err)
	}
}

func TestSender_CancelledContextIsTransient(t *testing.T) {
	srv, _ := recorder(t, func(w nethttp.ResponseWriter, r *nethttp.Request) {})
	s := newSender(t, routes.SenderOptions{URL: srv.URL})
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	err := s.Send(ctx, []*message.Envelope{envelope("x")})[0]
	if class, _ := senders.Classify(err); class != senders.Transient || !errors.Is(err, context.Canceled) {
		t.Fatalf("class %v, err %v", class, err)
	}
}

func TestSender_UnrenderableMessageIsPermanent(t *testing.T) {
	srv, got := recorder(t, func(w nethttp.ResponseWriter, r *nethttp.Request) {})
	s := newSender(t, routes.SenderOptions{URL: srv.URL + "/{payload.device}", Headers: map[string]string{"X-Line": "{topic.9}"}})
	errs := s.Send(t.Context(), []*message.Envelope{envelope(`{"device":"d1"}`), envelope(`not json`)})
	var fe *message.FieldError
	if class, _ := senders.Classify(errs[0]); class != senders.Fatal || !errors.As(errs[0], &fe) || fe.Placeholder != "topic.9" {
		t.Errorf("missing topic segment: %v", errs[0])
	}
	if class, _ := senders.Classify(errs[1]); class != senders.Fatal || !errors.As(errs[1], &fe) || fe.Placeholder != "payload.device" {
		t.Errorf("non-JSON payload: %v", errs[1])
	}
	if len(got) != 0 {
		t.Errorf("%d requests were sent for unrenderable messages", len(got))
	}
}

func TestNew_RejectsBadConfig(t *testing.T) {
	for name, o := range map[string]routes.SenderOptions{
		"no url":           {},
		"bad template":     {URL: "http://x/{nope}"},
		"not http":         {URL: "ftp://x/"},
		"bad header":       {URL: "http://x/", Headers: map[string]string{"A": "{header.}"}},
		"missing ca":       {URL: "https://x/", TLS: routes.TLS{CAFile: "/nonexistent/ca.pem"}},
		"cert without key": {URL: "https://x/", TLS: routes.TLS{CertFile: "/tmp/c.pem"}},
		"bad method":       {URL: "http://x/", Method: "PO ST"},
	} {
		if _, err := New(routes.SenderConfig{ID: name, Options: o}, 1, nil); err == nil {
			t.Errorf("%s: New accepted %+v", name, o)
		}
	}
}

// TestSender_ReusesConnections proves bodies are drained: error responses
// with bodies do not cost a new connection each.
func TestSender_ReusesConnections(t *testing.T) {
	var conns atomic.Int32
	srv := httptest.NewUnstartedServer(nethttp.HandlerFunc(func(w nethttp.ResponseWriter, r *nethttp.Request) {
		w.WriteHeader(nethttp.StatusBadRequest)
		io.WriteString(w, strings.Repeat("e", 4000))
	}))
	srv.Config.ConnState = func(_ net.Conn, st nethttp.ConnState) {
		if st == nethttp.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	s := newSender(t, routes.SenderOptions{URL: srv.URL})
	for range 20 {
		if class, _ := senders.Classify(sendOne(t, s, envelope("x"))); class != senders.Fatal {
			t.Fatal("want permanent")
		}
	}
	if n := conns.Load(); n != 1 {
		t.Fatalf("20 sequential requests used %d connections, want 1", n)
	}
}

// A 404 on a URL filled from the message says this message's URL is wrong:
// the message's failure, settled at once (DESIGN.md §11.3).
func TestSender_NotFoundOnAPerMessageURLIsPermanent(t *testing.T) {
	srv, _ := recorder(t, func(w nethttp.ResponseWriter, r *nethttp.Request) { w.WriteHeader(nethttp.StatusNotFound) })
	err := sendOne(t, newSender(t, routes.SenderOptions{URL: srv.URL + "/devices/{topic.1}"}), envelope("x"))
	if class, _ := senders.Classify(err); class != senders.Fatal {
		t.Fatalf("404 on a per-message URL: class %v (%v), want permanent", class, err)
	}
}

// A placeholder in the fragment does not reach the target (a fragment is
// not sent): every message gets the same request, so a 404 says the fixed
// URL is wrong, the target's failure, not this message's.
func TestSender_NotFoundWithOnlyAFragmentPlaceholderIsTransient(t *testing.T) {
	srv, _ := recorder(t, func(w nethttp.ResponseWriter, r *nethttp.Request) { w.WriteHeader(nethttp.StatusNotFound) })
	err := sendOne(t, newSender(t, routes.SenderOptions{URL: srv.URL + "/devices#{topic.1}"}), envelope("x"))
	if class, _ := senders.Classify(err); class != senders.Transient {
		t.Fatalf("404 on a URL whose only placeholder is in the fragment: class %v (%v), want transient", class, err)
	}
}

// A URL filled from the message can be too long for the target: nginx
// answers 414, net/http 431 (the request line counts toward its header
// limit). Either is this message's failure; on a fixed URL, the target's.
func TestSender_ALongPerMessageURLIsPermanent(t *testing.T) {
	for _, status := range []int{nethttp.StatusRequestURITooLong, nethttp.StatusRequestHeaderFieldsTooLarge} {
		srv, _ := recorder(t, func(w nethttp.ResponseWriter, r *nethttp.Request) { w.WriteHeader(status) })
		long := envelope("x")
		long.Topic = "plant/" + strings.Repeat("a", 3000)
		err := sendOne(t, newSender(t, routes.SenderOptions{URL: srv.URL + "/devices/{topic.1}"}), long)
		if class, _ := senders.Classify(err); class != senders.Fatal {
			t.Errorf("%d on a per-message URL: class %v (%v), want permanent", status, class, err)
		}
		err = sendOne(t, newSender(t, routes.SenderOptions{URL: srv.URL + "/devices"}), long)
		if class, _ := senders.Classify(err); class != senders.Transient {
			t.Errorf("%d on a fixed URL: class %v (%v), want transient", status, class, err)
		}
	}
}
