package httplistener

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"testing"

	"github.com/gobridge/gobridge/internal/testservices"

	"github.com/gobridge/gobridge/receivers"
)

const testToken = "s3cret-token"

// settlingSink is a sink that reports like the bridge does: Settled (the
// message's ID, or a fresh one, and the outcome), then done. With hold set,
// each message waits on the release channel first.
type settlingSink struct {
	outcome string
	hold    bool
	release chan struct{}
	got     chan receivers.Message
	mu      sync.Mutex
	n       int
}

func newSettlingSink(outcome string, hold bool) *settlingSink {
	return &settlingSink{outcome: outcome, hold: hold, release: make(chan struct{}, 1000), got: make(chan receivers.Message, 10_000)}
}

func (s *settlingSink) Accept(ctx context.Context, m receivers.Message, done func()) {
	s.got <- m
	settle := func() {
		id := m.ID
		if id == "" {
			s.mu.Lock()
			s.n++
			id = fmt.Sprintf("fresh-%d", s.n)
			s.mu.Unlock()
		}
		m.Report(receivers.Settled{ID: id, Outcome: s.outcome})
		done()
	}
	if !s.hold {
		settle()
		return
	}
	go func() {
		<-s.release
		settle()
	}()
}

type bundle struct {
	r    *Receiver
	url  string // http://addr/v1/publish
	stop func()
}

func setup(t *testing.T, o Options, sink receivers.Sink) *bundle {
	t.Helper()
	o.ID = cmpOr(o.ID, "web")
	o.Listen = cmpOr(o.Listen, "127.0.0.1:0")
	if o.Topics == nil {
		o.Topics = []string{"plant/#"}
	}
	if o.Token == "" && !o.AllowAnonymous {
		o.Token = testToken
	}
	r, err := New(o, sink, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	stop := testservices.Start(t, r.Run, r.Ready())
	return &bundle{r: r, url: "http://" + r.Addr().String() + publishPath, stop: stop}
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// post sends a request with the test token (headers with an empty value
// are removed) and returns the status, the decoded JSON answer and the
// response headers.
func post(t *testing.T, url string, body io.Reader, headers map[string]string) (int, map[string]any, http.Header) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+testToken)
	for k, v := range headers {
		if v == "" {
			req.Header.Del(k)
			continue
		}
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Error(err) // not Fatal: post also runs in goroutines of its own
		return 0, nil, nil
	}
	defer resp.Body.Close()
	var out map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Errorf("answer %d is not JSON: %v", resp.StatusCode, err)
	}
	return resp.StatusCode, out, resp.Header
}
