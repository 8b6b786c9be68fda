package http

import (
	"encoding/json"
	"errors"
	"fmt"
	nethttp "net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/gobridge/gobridge/message"
)

// FuzzURLTemplate renders URL templates with hostile topic segments and
// payload fields. A rendered URL, when there is one, keeps the template's
// scheme and host, has no "." or ".." segment, keeps the template's path
// segments and query keys (a value is exactly one segment or one query
// value), and makes a valid request; otherwise the message is refused with
// a field or target error, never a panic.
func FuzzURLTemplate(f *testing.F) {
	for _, seed := range []struct{ tmpl, seg, val string }{
		{"http://erp.example/in/{topic.1}/{payload.v}?k={payload.v}&t={topic}", "line-7", "a/b c"},
		{"http://erp.example/in/{topic.1}{payload.v}", ".", "."},
		{"http://erp.example/{topic.1}", "..", ""},
		{"http://erp.example/x?{payload.v}={topic.1}", "@evil.example", "#frag"},
		{"https://erp.example:8443/a/{payload.v}/b", "x", "%2e%2e"},
		{"http://erp.example/{payload.v}", "x", "//evil.example/x"},
		{"http://erp.example#{payload.v}", "x", "?a=b"},
		{"http://erp.example/{{{topic.1}}}/{payload.v}", "\x00\r\n", "\u202e..\uff0f"},
	} {
		f.Add(seed.tmpl, seed.seg, seed.val)
	}
	f.Fuzz(func(t *testing.T, tmpl, seg, val string) {
		ut, err := parseURLTemplate(tmpl)
		if err != nil {
			return
		}
		val = strings.ToValidUTF8(val, "\uFFFD") // what a JSON payload can carry
		payload, _ := json.Marshal(map[string]string{"v": val})
		e := &message.Envelope{ID: "id-1", Topic: "plant/" + seg + "/x", Payload: payload}
		u, err := ut.render(e, nil)
		if err != nil {
			var fe *message.FieldError
			if !errors.As(err, &fe) && !errors.Is(err, errURLTarget) && !errors.Is(err, errBadURL) {
				t.Fatalf("render %q: unexpected error %v", tmpl, err)
			}
			return
		}
		if u.Scheme != ut.scheme || !strings.EqualFold(u.Host, ut.host) {
			t.Fatalf("%q with %q, %q went to %s://%s", tmpl, seg, val, u.Scheme, u.Host)
		}
		if s, bad := dotSegment(u.EscapedPath()); bad {
			t.Fatalf("%q with %q, %q: dot segment %q in %s", tmpl, seg, val, s, u)
		}
		if _, err := nethttp.NewRequest("POST", u.String(), nil); err != nil {
			t.Fatalf("%q with %q, %q: %s makes no request: %v", tmpl, seg, val, u, err)
		}
		// A probe render with plain values gives the template's own shape:
		// hostile values must not add segments or query keys.
		probe, err := ut.render(&message.Envelope{ID: "i", Topic: strings.Repeat("p/", strings.Count(e.Topic, "/")) + "p",
			Payload: []byte(`{"v":"p"}`)}, nil)
		if err != nil {
			return
		}
		if got, want := strings.Count(u.EscapedPath(), "/"), strings.Count(probe.EscapedPath(), "/"); got != want {
			t.Fatalf("%q with %q, %q: %d path separators, the template has %d (%s)", tmpl, seg, val, got, want, u)
		}
		if got, want := queryShape(u), queryShape(probe); got != want {
			t.Fatalf("%q with %q, %q: query %q has %s, the template %s", tmpl, seg, val, u.RawQuery, got, want)
		}
		if tmpl == "http://erp.example/in/{topic.1}/{payload.v}?k={payload.v}&t={topic}" {
			q := u.Query()
			if q.Get("k") != val || q.Get("t") != e.Topic {
				t.Fatalf("query values %q, %q; want %q, %q", q.Get("k"), q.Get("t"), val, e.Topic)
			}
			parts := strings.Split(u.EscapedPath(), "/")
			if p, err := url.PathUnescape(parts[2]); err != nil || p != strings.Split(e.Topic, "/")[1] {
				t.Fatalf("segment %q, want %q", parts[2], strings.Split(e.Topic, "/")[1])
			}
			if p, err := url.PathUnescape(parts[3]); err != nil || p != val {
				t.Fatalf("segment %q, want %q", parts[3], val)
			}
		}
	})
}

// queryShape counts the query's separators: a value never adds one.
func queryShape(u *url.URL) string {
	return fmt.Sprintf("%d '&', %d '=', %d ';'", strings.Count(u.RawQuery, "&"), strings.Count(u.RawQuery, "="), strings.Count(u.RawQuery, ";"))
}
