package http

import (
	nethttp "net/http"
	"testing"

	"github.com/gobridge/gobridge/message"
	"github.com/gobridge/gobridge/routes"
)

func TestSender_URLValuesAreEscaped(t *testing.T) {
	var rawPath, rawQuery string
	srv, _ := recorder(t, func(w nethttp.ResponseWriter, r *nethttp.Request) {
		rawPath, rawQuery = r.URL.EscapedPath(), r.URL.RawQuery
	})
	s := newSender(t, routes.SenderOptions{URL: srv.URL + "/ingest/{topic.1}/{payload.id}?device={payload.dev}&t={{x}}"})
	e := &message.Envelope{ID: "1", Topic: "factory/line 7?x#y/t", Payload: []byte(`{"id":"a/b","dev":"d&e=f g"}`)}
	if err := sendOne(t, s, e); err != nil {
		t.Fatal(err)
	}
	if want := "/ingest/line%207%3Fx%23y/a%2Fb"; rawPath != want {
		t.Errorf("path %q, want %q", rawPath, want)
	}
	if want := "device=d%26e%3Df+g&t={x}"; rawQuery != want {
		t.Errorf("query %q, want %q", rawQuery, want)
	}
}

func TestParseURLTemplate(t *testing.T) {
	for in, want := range map[string]int{
		"http://x/":             1,
		"http://x/{topic}":      2,
		"http://x/{topic}/{id}": 4,
		"http://x/{{a}}{id}}}":  3,
		"http://x?{topic}":      2,
		"http://x#{topic}":      2,
	} {
		u, err := parseURLTemplate(in)
		if err != nil || len(u.parts) != want {
			t.Errorf("parseURLTemplate(%q): %d parts, err %v; want %d", in, len(u.parts), err, want)
		}
	}
	for _, bad := range []string{"http://x/{", "http://x/}", "http://x/{nope}", "http://x/{payload.}",
		"{topic}", "http://{topic}/", "http://x{topic}/", "http://x:{payload.port}/", "{payload.scheme}://x/", "http://u:{id}@x/"} {
		if _, err := parseURLTemplate(bad); err == nil {
			t.Errorf("parseURLTemplate(%q) accepted", bad)
		}
	}
}

// TestSender_SpaceInALiteralQueryIsEscaped: a space (or another byte a
// request line cannot hold) in the url's literal query text was sent raw,
// so the target answered 400 to every request and every message was
// dead-lettered as refused. It is percent-encoded, as in the path.
func TestSender_SpaceInALiteralQueryIsEscaped(t *testing.T) {
	var rawQuery string
	var src []string
	srv, _ := recorder(t, func(w nethttp.ResponseWriter, r *nethttp.Request) {
		rawQuery, src = r.URL.RawQuery, r.URL.Query()["src"]
	})
	for _, u := range []string{srv.URL + "/in?src=line 7 A", srv.URL + "/in/{topic.1}?src=line 7 A&d={topic.0}"} {
		s := newSender(t, routes.SenderOptions{URL: u})
		if err := sendOne(t, s, envelope("x")); err != nil {
			t.Fatalf("url %q: %v", u, err)
		}
		if len(src) != 1 || src[0] != "line 7 A" {
			t.Errorf("url %q: query %q, src %q", u, rawQuery, src)
		}
	}
}
