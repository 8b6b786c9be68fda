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
