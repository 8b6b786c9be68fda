package http

import (
	"errors"
	"fmt"
	nethttp "net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gobridge/gobridge/message"
	"github.com/gobridge/gobridge/routes"
	"github.com/gobridge/gobridge/senders"
)

// A header value rendered from the message is bounded: over
// MaxHeaderValueBytes the message fails permanently, naming the header and
// its size, and no request is made (the target never sees it, so it cannot
// answer 431 and look down). At the bound it is sent whole. Literal values
// (the operator's) are not bounded.
func TestSender_HeaderFromTheMessageOverTheBoundIsPermanent(t *testing.T) {
	srv, got := recorder(t, func(w nethttp.ResponseWriter, r *nethttp.Request) { w.WriteHeader(nethttp.StatusNoContent) })
	fixed := strings.Repeat("f", MaxHeaderValueBytes+100)
	s := newSender(t, routes.SenderOptions{URL: srv.URL, Headers: map[string]string{"X-Reading": "{payload.r}", "X-Fixed": fixed}})

	atBound := reading(MaxHeaderValueBytes)
	if err := sendOne(t, s, atBound); err != nil {
		t.Fatalf("a %d-byte header: %v", MaxHeaderValueBytes, err)
	}
	if r := <-got; len(r.header.Get("X-Reading")) != MaxHeaderValueBytes || r.header.Get("X-Fixed") != fixed {
		t.Fatalf("sent X-Reading of %d bytes, X-Fixed of %d", len(r.header.Get("X-Reading")), len(r.header.Get("X-Fixed")))
	}

	over := reading(200 << 10)
	err := sendOne(t, s, over)
	if c, _ := senders.Classify(err); c != senders.Fatal {
		t.Fatalf("a 200 KiB header: class %v (%v), want Fatal", c, err)
	}
	want := fmt.Sprintf("header X-Reading: the value is %d bytes, more than %d", 200<<10, MaxHeaderValueBytes)
	if !strings.Contains(err.Error(), want) {
		t.Errorf("reason %q does not say %q", err, want)
	}

	// An ID from idempotency_key.from is a header too (Idempotency-Key);
	// the reason clips it.
	longID := reading(4)
	longID.ID = strings.Repeat("i", MaxHeaderValueBytes+1)
	err = sendOne(t, s, longID)
	if c, _ := senders.Classify(err); c != senders.Fatal || !strings.Contains(err.Error(), "Idempotency-Key") {
		t.Fatalf("a %d-byte ID: class %v (%.200v), want Fatal naming Idempotency-Key", len(longID.ID), c, err)
	}
	if len(err.Error()) > 1024 {
		t.Errorf("reason of %d bytes: the ID is not clipped", len(err.Error()))
	}
	if n := len(got); n != 0 {
		t.Fatalf("%d requests for messages over the bound, want none", n)
	}
}

// A 431 from a real net/http server (small MaxHeaderBytes) is this
// message's failure when a header comes from the message, and the
// target's (retried) when every header is fixed: then the configuration is
// wrong for every message.
func TestSender_HeaderFieldsTooLarge(t *testing.T) {
	srv := httptest.NewUnstartedServer(nethttp.HandlerFunc(func(w nethttp.ResponseWriter, r *nethttp.Request) {
		w.WriteHeader(nethttp.StatusNoContent)
	}))
	srv.Config.MaxHeaderBytes = 1 // net/http allows 4 KiB more
	srv.Start()
	t.Cleanup(srv.Close)
	const big = 6 << 10 // bytes: over the target's limit, within MaxHeaderValueBytes

	templated := newSender(t, routes.SenderOptions{URL: srv.URL, Headers: map[string]string{"X-Reading": "{payload.r}"}})
	err := sendOne(t, templated, reading(big))
	var se *StatusError
	if c, _ := senders.Classify(err); c != senders.Fatal || !errors.As(err, &se) || se.Status != nethttp.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("431 with a templated header: class %v (%v), want Fatal with status 431", c, err)
	}
	if err := sendOne(t, templated, reading(4)); err != nil {
		t.Fatalf("the next, normal message: %v", err)
	}

	fixed := newSender(t, routes.SenderOptions{URL: srv.URL, Headers: map[string]string{"X-Fixed": strings.Repeat("f", big)}})
	err = sendOne(t, fixed, reading(4))
	if c, _ := senders.Classify(err); c != senders.Transient || !errors.As(err, &se) || se.Status != nethttp.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("431 with fixed headers: class %v (%v), want Transient with status 431", c, err)
	}
}

// reading is a message whose payload is {"r":"aaa…"}, with n bytes in r.
func reading(n int) *message.Envelope {
	return envelope(`{"r":"` + strings.Repeat("a", n) + `"}`)
}

// A header value whose literal text around a placeholder holds a control
// character, and a url whose port no connection can use, fail every
// message (the first permanently, the second by retrying for ever): New
// refuses them, so `gobridge check` reports them.
func TestNew_RefusesWhatFailsEveryMessage(t *testing.T) {
	for name, o := range map[string]routes.SenderOptions{
		"newline before a placeholder": {URL: "http://127.0.0.1:1/in", Headers: map[string]string{"X-Line": "line\n{topic.1}"}},
		"NUL after a placeholder":      {URL: "http://127.0.0.1:1/in", Headers: map[string]string{"X-Line": "{topic}\x00"}},
		"port out of range":            {URL: "http://127.0.0.1:99999/in/{topic.1}"},
		"port 0":                       {URL: "http://127.0.0.1:0/in"},
	} {
		if _, err := New(routes.SenderConfig{ID: "test", Type: routes.SenderHTTP, Options: o}, 1, nil); err == nil {
			t.Errorf("%s: New accepted %+v", name, o)
		}
	}
	// Tab is allowed, with or without a placeholder.
	newSender(t, routes.SenderOptions{URL: "http://127.0.0.1:65535/in", Headers: map[string]string{"X-A": "a\t{topic}"}})
}

// An ID from idempotency_key.from with a line break or another control
// character cannot be an Idempotency-Key header: net/http refuses such a
// request before sending it. That is the message's failure (permanent,
// naming the header), never a target error that is retried forever and
// marks the sender down; the next message goes through.
func TestSender_IDWithAControlCharacterIsPermanent(t *testing.T) {
	srv, got := recorder(t, func(w nethttp.ResponseWriter, r *nethttp.Request) { w.WriteHeader(nethttp.StatusNoContent) })
	s := newSender(t, routes.SenderOptions{URL: srv.URL})
	for _, id := range []string{"a\nb", "a\r\nX-Evil: 1", "nul\x00", "del\x7f"} {
		e := reading(4)
		e.ID = id
		err := sendOne(t, s, e)
		if c, _ := senders.Classify(err); c != senders.Fatal || !strings.Contains(fmt.Sprint(err), "Idempotency-Key") {
			t.Fatalf("ID %q: class %v (%v), want Fatal naming Idempotency-Key", id, c, err)
		}
	}
	if n := len(got); n != 0 {
		t.Fatalf("%d requests for IDs with control characters, want none", n)
	}
	e := reading(4)
	e.ID = "tab\tand-ünïcode"
	if err := sendOne(t, s, e); err != nil {
		t.Fatalf("an ID with a tab and non-ASCII: %v", err)
	}
	if r := <-got; r.header.Get("Idempotency-Key") != e.ID {
		t.Fatalf("Idempotency-Key %q, want %q", r.header.Get("Idempotency-Key"), e.ID)
	}
}
