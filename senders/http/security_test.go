package http

import (
	"errors"
	"net"
	nethttp "net/http"
	"strings"
	"testing"

	"github.com/gobridge/gobridge/message"
	"github.com/gobridge/gobridge/routes"
	"github.com/gobridge/gobridge/senders"
)

// TestSender_RefusesDotSegments: a topic segment or payload field of "."
// or ".." would walk the target's paths (/devices/../admin); such a
// message is a permanent failure and no request is made.
func TestSender_RefusesDotSegments(t *testing.T) {
	srv, got := recorder(t, func(w nethttp.ResponseWriter, r *nethttp.Request) {})
	s := newSender(t, routes.SenderOptions{URL: srv.URL + "/api/devices/{topic.1}/{payload.id}/data?x={payload.id}"})
	for _, c := range []struct{ topic, payload string }{
		{"plant/../x", `{"id":"ok"}`},
		{"plant/./x", `{"id":"ok"}`},
		{"plant/line-7/x", `{"id":".."}`},
		{"plant/line-7/x", `{"id":"."}`},
	} {
		e := &message.Envelope{ID: "1", Topic: c.topic, Payload: []byte(c.payload)}
		err := sendOne(t, s, e)
		if class, _ := senders.Classify(err); class != senders.Fatal || !errors.Is(err, errURLTarget) {
			t.Errorf("topic %q payload %s: %v (class %v), want a permanent error", c.topic, c.payload, err, class)
		}
	}
	if len(got) != 0 {
		t.Fatalf("%d requests reached the target, path %q", len(got), (<-got).path)
	}
	// Dots inside a segment, an escaped dot pair and dots in the query are
	// just text.
	e := &message.Envelope{ID: "1", Topic: "plant/a..b/x", Payload: []byte(`{"id":"%2e%2e"}`)}
	if err := sendOne(t, s, e); err != nil {
		t.Fatal(err)
	}
	if r := <-got; r.path != "/api/devices/a..b/%2e%2e/data" {
		t.Errorf("path %q", r.path)
	}
}

// TestNew_RefusesPlaceholdersInSchemeAndHost: a message must not choose
// its target's host; a value right after the host could add "@evil" or
// ":port".
func TestNew_RefusesPlaceholdersInSchemeAndHost(t *testing.T) {
	for _, u := range []string{"http://{payload.host}/x", "http://127.0.0.1{topic.0}/x", "http://127.0.0.1:{payload.port}/x",
		"{payload.scheme}://127.0.0.1/x", "http://u:{payload.p}@127.0.0.1/x", "http://127.0.0.1{topic}"} {
		if _, err := New(routes.SenderConfig{ID: "t", Options: routes.SenderOptions{URL: u}}, 1, nil); err == nil {
			t.Errorf("New accepted url %q", u)
		}
	}
	for _, u := range []string{"http://127.0.0.1/{topic}", "http://127.0.0.1?t={topic}", "http://127.0.0.1:8080#{id}", "http://127.0.0.1"} {
		if _, err := New(routes.SenderConfig{ID: "t", Options: routes.SenderOptions{URL: u}}, 1, nil); err != nil {
			t.Errorf("New refused url %q: %v", u, err)
		}
	}
}

// TestNew_HostHeaderIsNotATemplate: a templated Host header would let a
// message pick the virtual host; a literal one stays (a fixed virtual host
// behind an IP address).
func TestNew_HostHeaderIsNotATemplate(t *testing.T) {
	_, err := New(routes.SenderConfig{ID: "t", Options: routes.SenderOptions{URL: "http://127.0.0.1/",
		Headers: map[string]string{"host": "{payload.tenant}.erp.example"}}}, 1, nil)
	if !errors.Is(err, ErrTemplatedHost) {
		t.Fatalf("templated Host: %v, want ErrTemplatedHost", err)
	}
	var host string
	srv, _ := recorder(t, func(w nethttp.ResponseWriter, r *nethttp.Request) { host = r.Host })
	s := newSender(t, routes.SenderOptions{URL: srv.URL + "/x", Headers: map[string]string{"Host": "erp.example"}})
	if err := sendOne(t, s, envelope("x")); err != nil || host != "erp.example" {
		t.Fatalf("literal Host: %q, %v", host, err)
	}
}

// TestSender_ErrorsNeverHoldSecrets: the API key in the URL's query and
// the password in its user-info never appear in an error, whatever the
// failure: a status with a body that echoes the URL, a redirect to a URL
// with a code, a refused connection (Go's *url.Error holds the whole URL),
// a URL that does not parse.
func TestSender_ErrorsNeverHoldSecrets(t *testing.T) {
	const key, pass, code = "K-c0ffee-4711", "pw-0f-the-erp", "oauth-c0de-99"
	srv, _ := recorder(t, func(w nethttp.ResponseWriter, r *nethttp.Request) {
		if r.URL.Query().Get("redirect") != "" {
			w.Header().Set("Location", "/login?code="+code+"&next=/x")
			w.WriteHeader(nethttp.StatusFound)
			return
		}
		w.WriteHeader(nethttp.StatusBadRequest)
		_, _ = w.Write([]byte("bad request for " + r.URL.String()))
	})
	withCreds := strings.Replace(srv.URL, "http://", "http://erp:"+pass+"@", 1)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://erp:" + pass + "@" + ln.Addr().String()
	ln.Close()
	var errs []error
	for _, u := range []string{
		withCreds + "/ingest/{topic.1}?api_key=" + key,
		withCreds + "/ingest/{topic.1}?redirect=1&apikey=" + key,
		closed + "/ingest/{topic.1}?X-Amz-Signature=" + key,
	} {
		s := newSender(t, routes.SenderOptions{URL: u})
		errs = append(errs, sendOne(t, s, envelope("x")))
	}
	s := newSender(t, routes.SenderOptions{URL: withCreds + "/ingest/{payload.id}?token=" + key})
	errs = append(errs, sendOne(t, s, envelope(`{"id":"x"}`)), sendOne(t, s, envelope(`{}`)))
	for i, err := range errs {
		if err == nil {
			t.Fatalf("case %d: no error", i)
		}
		if msg := err.Error(); strings.Contains(msg, key) || strings.Contains(msg, pass) || strings.Contains(msg, code) {
			t.Errorf("case %d: a secret leaked: %s", i, msg)
		} else {
			t.Logf("case %d: %s", i, msg)
		}
	}
	if class, _ := senders.Classify(errs[2]); class != senders.Transient {
		t.Errorf("a refused connection is %v, want transient", class)
	}
	if _, err := New(routes.SenderConfig{ID: "t", Options: routes.SenderOptions{URL: "http://erp:" + pass + "@h:port/?key=" + key}}, 1, nil); err == nil ||
		strings.Contains(err.Error(), pass) || strings.Contains(err.Error(), key) {
		t.Errorf("New with a bad url: %v", err)
	}
}

// TestSender_ValuesStayOneSegmentAfterRawLiterals: a literal the path
// cannot hold raw (a space) made url.Parse drop the raw path, and every
// value's %2F became a separator: "tenant-b/admin" added segments.
// Found by FuzzURLTemplate.
func TestSender_ValuesStayOneSegmentAfterRawLiterals(t *testing.T) {
	var raw string
	srv, _ := recorder(t, func(w nethttp.ResponseWriter, r *nethttp.Request) { raw = r.URL.EscapedPath() })
	s := newSender(t, routes.SenderOptions{URL: srv.URL + "/my files/{{x}}/{payload.v}"})
	e := &message.Envelope{ID: "1", Topic: "t", Payload: []byte(`{"v":"tenant-b/admin"}`)}
	if err := sendOne(t, s, e); err != nil {
		t.Fatal(err)
	}
	if want := "/my%20files/%7Bx%7D/tenant-b%2Fadmin"; raw != want {
		t.Fatalf("path %q, want %q", raw, want)
	}
	if _, err := New(routes.SenderConfig{ID: "t", Options: routes.SenderOptions{URL: srv.URL + "/%zz/{topic}"}}, 1, nil); err == nil {
		t.Error("New accepted a malformed escape in the literal path")
	}
}

// TestSender_ControlCharacterInHeaderIsPermanent: a header value filled
// from a message with a control character (other than the CR, LF and NUL
// checked before) is refused by net/http before any request goes out. That
// is the message's failure: it must be permanent, not a transient error
// retried forever that also counts toward marking the target down.
func TestSender_ControlCharacterInHeaderIsPermanent(t *testing.T) {
	srv, got := recorder(t, func(w nethttp.ResponseWriter, r *nethttp.Request) {})
	s := newSender(t, routes.SenderOptions{URL: srv.URL + "/x", Headers: map[string]string{"X-Device": "{payload.device}"}})
	for _, v := range []string{`d\u0001`, `d\u001b[31m`, `d\u007f`, `d\u000b`} {
		err := sendOne(t, s, envelope(`{"device":"`+v+`"}`))
		if class, _ := senders.Classify(err); class != senders.Fatal {
			t.Errorf("device %s: %v (class %v), want a permanent error", v, err, class)
		}
	}
	if len(got) != 0 {
		t.Errorf("%d requests reached the target", len(got))
	}
	// A tab and non-ASCII text are valid field values.
	if err := sendOne(t, s, envelope(`{"device":"d\tä"}`)); err != nil {
		t.Fatal(err)
	}
	if r := <-got; r.header.Get("X-Device") != "d\tä" {
		t.Errorf("X-Device %q", r.header.Get("X-Device"))
	}
}

// TestNew_RefusesHeadersNoRequestCanCarry: a header name that is not an
// HTTP token ("X Device", "X:Y") or a literal value with a control
// character makes net/http refuse every request; New must refuse the
// config instead of failing every message (transient, the sender marked
// down, or each one dead-lettered).
func TestNew_RefusesHeadersNoRequestCanCarry(t *testing.T) {
	for name, h := range map[string]map[string]string{
		"space in name": {"X Device": "a"},
		"colon in name": {"X:Device": "a"},
		"empty name":    {"": "a"},
		"non-ASCII":     {"X-Gerät": "a"},
		"ctl in value":  {"X-Key": "a\x01b"},
		"LF in value":   {"X-Key": "a\nb"},
	} {
		if _, err := New(routes.SenderConfig{ID: name, Options: routes.SenderOptions{URL: "http://127.0.0.1/", Headers: h}}, 1, nil); err == nil {
			t.Errorf("%s: New accepted headers %q", name, h)
		}
	}
	if _, err := New(routes.SenderConfig{ID: "ok", Options: routes.SenderOptions{URL: "http://127.0.0.1/",
		Headers: map[string]string{"X-Api_Key.v2!": "a\tb ä", "X-Device": "{payload.device}"}}}, 1, nil); err != nil {
		t.Errorf("New refused valid headers: %v", err)
	}
}
