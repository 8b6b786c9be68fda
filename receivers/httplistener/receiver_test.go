package httplistener

import (
	"errors"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gobridge/gobridge/receivers"
	"github.com/gobridge/gobridge/receivers/internal/testsink"
	"github.com/gobridge/gobridge/receivers/internal/testtls"
)

func TestReceiver_AnswersOnceSettled(t *testing.T) {
	t.Parallel()
	sink := newSettlingSink(receivers.OutcomeCommitted, true)
	b := setup(t, Options{Headers: []string{"x-line"}}, sink)

	type answer struct {
		status int
		body   map[string]any
	}
	answered := make(chan answer, 1)
	go func() {
		st, body, _ := post(t, b.url+"/plant/line%201/temp", strings.NewReader(`{"t":21.5}`),
			map[string]string{"Content-Type": "application/json", "X-Line": "L1", "X-Other": "no", "Idempotency-Key": "k-1"})
		answered <- answer{st, body}
	}()
	m := <-sink.got
	if m.Topic != "plant/line 1/temp" || string(m.Payload) != `{"t":21.5}` || m.Receiver != "web" || m.Size != 10 {
		t.Fatalf("message = %+v", m)
	}
	if m.Headers["Content-Type"] != "application/json" || m.Headers["X-Line"] != "L1" || len(m.Headers) != 2 {
		t.Fatalf("headers = %v", m.Headers)
	}
	if want := EnvelopeID("web", "plant/line 1/temp", "k-1"); m.ID != want {
		t.Fatalf("ID = %q, want %q", m.ID, want)
	}
	select {
	case a := <-answered:
		t.Fatalf("answered %d before the message was settled", a.status)
	default:
	}
	if st := b.r.Stats(); st.InFlight != 1 || st.InFlightBytes != 10 {
		t.Fatalf("stats while open = %+v", st)
	}
	sink.release <- struct{}{}
	a := <-answered
	if a.status != http.StatusOK || a.body["id"] != m.ID || a.body["outcome"] != receivers.OutcomeCommitted {
		t.Fatalf("answer = %d %v", a.status, a.body)
	}
	if st := b.r.Stats(); st.Received != 1 || st.Acked != 1 || st.InFlight != 0 || st.InFlightBytes != 0 {
		t.Fatalf("stats = %+v", st)
	}
}

func TestReceiver_RefusesBeforeReading(t *testing.T) {
	t.Parallel()
	sink := testsink.New(true)
	b := setup(t, Options{}, sink)
	for _, c := range []struct {
		name    string
		method  string
		path    string
		headers map[string]string
		status  int
	}{
		{"browser origin", "POST", "/v1/publish/plant/a", map[string]string{"Origin": "https://evil.example"}, http.StatusForbidden},
		{"no token", "POST", "/v1/publish/plant/a", map[string]string{"Authorization": ""}, http.StatusUnauthorized},
		{"wrong token", "POST", "/v1/publish/plant/a", map[string]string{"Authorization": "Bearer s3cret-tokem"}, http.StatusUnauthorized},
		{"basic auth", "POST", "/v1/publish/plant/a", map[string]string{"Authorization": "Basic " + testToken}, http.StatusUnauthorized},
		{"unknown endpoint", "POST", "/v2/publish/plant/a", nil, http.StatusNotFound},
		{"GET", "GET", "/v1/publish/plant/a", nil, http.StatusMethodNotAllowed},
		{"topic outside the receiver's topics", "POST", "/v1/publish/office/a", nil, http.StatusForbidden},
		{"wildcard topic", "POST", "/v1/publish/plant/%2B/a", nil, http.StatusBadRequest},
		{"hash topic", "POST", "/v1/publish/plant/%23", nil, http.StatusBadRequest},
		{"empty topic", "POST", "/v1/publish/", nil, http.StatusBadRequest},
		{"NUL in topic", "POST", "/v1/publish/plant/a%00b", nil, http.StatusBadRequest},
		{"empty idempotency key", "POST", "/v1/publish/plant/a", map[string]string{"Idempotency-Key": " "}, http.StatusBadRequest},
		{"long idempotency key", "POST", "/v1/publish/plant/a", map[string]string{"Idempotency-Key": strings.Repeat("k", MaxIdempotencyKey+1)}, http.StatusBadRequest},
		{"batch without NDJSON", "POST", "/v1/publish", map[string]string{"Content-Type": "application/json"}, http.StatusUnsupportedMediaType},
		// The payload would be the compressed bytes, labelled with the
		// Content-Type of what they compress.
		{"gzip body", "POST", "/v1/publish/plant/a", map[string]string{"Content-Encoding": "gzip"}, http.StatusUnsupportedMediaType},
		{"gzip batch", "POST", "/v1/publish", map[string]string{"Content-Type": "application/x-ndjson", "Content-Encoding": "gzip"}, http.StatusUnsupportedMediaType},
	} {
		t.Run(c.name, func(t *testing.T) {
			req, err := http.NewRequest(c.method, strings.TrimSuffix(b.url, publishPath)+c.path, strings.NewReader("payload"))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Authorization", "Bearer "+testToken)
			for k, v := range c.headers {
				req.Header.Set(k, v)
				if v == "" {
					req.Header.Del(k)
				}
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != c.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, c.status, body)
			}
			if c.status == http.StatusUnauthorized && resp.Header.Get("WWW-Authenticate") == "" {
				t.Error("401 without WWW-Authenticate")
			}
		})
	}
	if len(sink.C) != 0 {
		t.Fatalf("%d refused requests reached the sink", len(sink.C))
	}
	if st := b.r.Stats(); st.Denied != 5 || st.Malformed != 9 || st.Received != 0 {
		t.Fatalf("stats = %+v", st)
	}
}

func TestReceiver_UnroutedIs404(t *testing.T) {
	t.Parallel()
	b := setup(t, Options{}, newSettlingSink(receivers.OutcomeUnrouted, false))
	st, body, _ := post(t, b.url+"/plant/nobody", strings.NewReader("x"), nil)
	if st != http.StatusNotFound || body["error"] == nil {
		t.Fatalf("answer = %d %v", st, body)
	}
}

func TestReceiver_AnonymousNeedsNoToken(t *testing.T) {
	t.Parallel()
	b := setup(t, Options{AllowAnonymous: true}, newSettlingSink(receivers.OutcomeDelivered, false))
	st, body, _ := post(t, b.url+"/plant/a", strings.NewReader("x"), map[string]string{"Authorization": ""})
	if st != http.StatusOK || body["outcome"] != receivers.OutcomeDelivered {
		t.Fatalf("answer = %d %v", st, body)
	}
}

// zeros is a reader of n zero bytes that allocates nothing. The client's
// transport may still read it after the answer arrived: read is atomic.
type zeros struct {
	n    int64
	read atomic.Int64
}

func (z *zeros) Read(p []byte) (int, error) {
	read := z.read.Load()
	if read >= z.n {
		return 0, io.EOF
	}
	k := min(int64(len(p)), z.n-read)
	clear(p[:k])
	z.read.Add(k)
	return int(k), nil
}

// TestReceiver_OversizedBodyIsRefusedUnread is not parallel: it measures
// the process's allocations.
func TestReceiver_OversizedBodyIsRefusedUnread(t *testing.T) {
	sink := testsink.New(true)
	const limit = 64 << 10
	b := setup(t, Options{MaxPayloadBytes: limit, MaxBatchBytes: limit}, sink)

	t.Run("declared length", func(t *testing.T) {
		st, _, _ := post(t, b.url+"/plant/big", strings.NewReader(strings.Repeat("x", limit+1)), nil)
		if st != http.StatusRequestEntityTooLarge {
			t.Fatalf("status %d", st)
		}
	})
	t.Run("exactly the limit passes", func(t *testing.T) {
		st, _, _ := post(t, b.url+"/plant/big", strings.NewReader(strings.Repeat("x", limit)), nil)
		if st != http.StatusOK {
			t.Fatalf("status %d", st)
		}
		if m := sink.Next(t).Msg; len(m.Payload) != limit {
			t.Fatalf("payload %d bytes", len(m.Payload))
		}
	})
	t.Run("chunked 256 MiB", func(t *testing.T) {
		// No Content-Length: the server reads limit+1 bytes, answers 413 and
		// closes the connection. Memory allocated meanwhile (server and
		// client in this process) stays far below the body's size.
		body := &zeros{n: 256 << 20}
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		req, _ := http.NewRequest(http.MethodPost, b.url+"/plant/big", io.NopCloser(body))
		req.Header.Set("Authorization", "Bearer "+testToken)
		req.ContentLength = -1
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusRequestEntityTooLarge {
				t.Fatalf("status %d", resp.StatusCode)
			}
		}
		runtime.ReadMemStats(&after)
		if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 16<<20 {
			t.Fatalf("%d bytes allocated for a refused body", alloc)
		}
		if sent := body.read.Load(); sent > 64<<20 {
			t.Fatalf("the client could send %d bytes of a refused body", sent)
		}
		t.Logf("client sent %d of %d bytes", body.read.Load(), body.n)
	})
	if st := b.r.Stats(); st.TooLarge != 2 || st.InFlightBytes != 0 {
		t.Fatalf("stats = %+v", st)
	}
}

func TestReceiver_NotSettledInTimeIs503(t *testing.T) {
	t.Parallel()
	sink := newSettlingSink(receivers.OutcomeCommitted, true) // never released
	b := setup(t, Options{SettleTimeout: 100 * time.Millisecond, WriteTimeout: 10 * time.Second}, sink)
	st, body, h := post(t, b.url+"/plant/a", strings.NewReader("x"), map[string]string{"Idempotency-Key": "k"})
	if st != http.StatusServiceUnavailable || h.Get("Retry-After") != "5" || body["id"] != EnvelopeID("web", "plant/a", "k") {
		t.Fatalf("answer = %d %v %v", st, body, h)
	}
	if s := b.r.Stats(); s.Abandoned != 1 || s.InFlight != 0 {
		t.Fatalf("stats = %+v", s)
	}
}

func TestReceiver_MaxInFlightRefusesAtOnce(t *testing.T) {
	t.Parallel()
	sink := newSettlingSink(receivers.OutcomeCommitted, true)
	b := setup(t, Options{MaxInFlight: 1}, sink)
	first := make(chan int, 1)
	go func() {
		st, _, _ := post(t, b.url+"/plant/a", strings.NewReader("1"), nil)
		first <- st
	}()
	<-sink.got
	st, _, h := post(t, b.url+"/plant/a", strings.NewReader("2"), nil)
	if st != http.StatusServiceUnavailable || h.Get("Retry-After") == "" {
		t.Fatalf("second request: %d", st)
	}
	sink.release <- struct{}{}
	if st := <-first; st != http.StatusOK {
		t.Fatalf("first request: %d", st)
	}
	if s := b.r.Stats(); s.Busy != 1 {
		t.Fatalf("stats = %+v", s)
	}
}

func TestEnvelopeID_SeparatesProducersTopicsAndKeys(t *testing.T) {
	t.Parallel()
	ids := map[string]bool{}
	for _, c := range [][3]string{
		{"web", "a/b", "k"}, {"web2", "a/b", "k"}, {"web", "a/b2", "k"}, {"web", "a/b", "k2"},
		{"web", "a/b\x00", "k"}, {"web", "a/b", "\x00k"},
	} {
		id := EnvelopeID(c[0], c[1], c[2])
		if len(id) != 64 || ids[id] {
			t.Fatalf("EnvelopeID%q = %q (collision or not hex SHA-256)", c, id)
		}
		ids[id] = true
	}
	if id, again := EnvelopeID("web", "a/b", "k"), EnvelopeID(string([]byte("web")), "a/b", "k"); id != again {
		t.Fatal("not deterministic")
	}
}

func TestNew_RefusesBadOptions(t *testing.T) {
	t.Parallel()
	sink := testsink.New(true)
	for name, o := range map[string]Options{
		"no token":              {ID: "w", Topics: []string{"#"}},
		"token and anonymous":   {ID: "w", Topics: []string{"#"}, Token: "t", AllowAnonymous: true},
		"no topics":             {ID: "w", Token: "t"},
		"write before settle":   {ID: "w", Topics: []string{"#"}, Token: "t", SettleTimeout: time.Minute, WriteTimeout: time.Second},
		"window below a batch":  {ID: "w", Topics: []string{"#"}, Token: "t", MaxInflightBytes: 1 << 20},
		"window below payloads": {ID: "w", Topics: []string{"#"}, Token: "t", MaxInflightBytes: 1, MaxBatchBytes: 1},
	} {
		if _, err := New(o, sink, nil); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: err = %v, want ErrConfig", name, err)
		}
	}
}

func TestReceiver_TLSOnly(t *testing.T) {
	t.Parallel()
	files := testtls.Write(t)
	b := setup(t, Options{TLS: files.Server(t, false)}, newSettlingSink(receivers.OutcomeCommitted, false))
	https := &http.Client{Transport: &http.Transport{TLSClientConfig: files.Client(t, false)}}
	req, _ := http.NewRequest(http.MethodPost, strings.Replace(b.url, "http://", "https://", 1)+"/plant/a", strings.NewReader("x"))
	req.Header.Set("Authorization", "Bearer "+testToken)
	resp, err := https.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("over TLS: %d", resp.StatusCode)
	}
	plain, err := http.Post(b.url+"/plant/a", "text/plain", strings.NewReader("x"))
	if err == nil {
		plain.Body.Close()
		if plain.StatusCode == http.StatusOK {
			t.Fatal("a plain HTTP request was served by a TLS listener")
		}
	}
}

func TestReceiver_StopAnswersWaitingRequests503(t *testing.T) {
	t.Parallel()
	sink := newSettlingSink(receivers.OutcomeCommitted, true) // never released
	b := setup(t, Options{}, sink)
	answered := make(chan int, 1)
	go func() {
		st, _, _ := post(t, b.url+"/plant/a", strings.NewReader("x"), nil)
		answered <- st
	}()
	<-sink.got
	b.stop()
	if st := <-answered; st != http.StatusServiceUnavailable {
		t.Fatalf("a request waiting at stop got %d", st)
	}
	if s := b.r.Status(); s.Connected || s.Reason == "" {
		t.Fatalf("status after stop = %+v", s)
	}
}

// TestReceiver_BoundsOpenConnections: clients that connect and send nothing
// hold at most ConnsPerRequest × MaxInFlight connections; a request on one
// more connection waits, unserved, until one of them closes.
func TestReceiver_BoundsOpenConnections(t *testing.T) {
	t.Parallel()
	sink := newSettlingSink(receivers.OutcomeCommitted, false)
	b := setup(t, Options{MaxInFlight: 1}, sink)
	var idle []net.Conn
	for range 4 { // ConnsPerRequest × MaxInFlight
		c, err := net.Dial("tcp", b.r.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		idle = append(idle, c)
	}
	answered := make(chan int, 1)
	go func() {
		st, _, _ := post(t, b.url+"/plant/a", strings.NewReader("1"), nil)
		answered <- st
	}()
	select {
	case m := <-sink.got:
		t.Fatalf("served %q with %d idle connections open", m.Payload, len(idle))
	case <-time.After(300 * time.Millisecond): // a negative check: a slow machine can only make it pass
	}
	idle[0].Close()
	if st := <-answered; st != http.StatusOK {
		t.Fatalf("request after a connection closed: %d", st)
	}
}
