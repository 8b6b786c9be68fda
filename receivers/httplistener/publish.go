package httplistener

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gobridge/gobridge/bearer"
	"github.com/gobridge/gobridge/receivers"
	"github.com/gobridge/gobridge/topics"
)

const publishPath = "/v1/publish"

// errTopic is wrapped by every topic a request names that is not a valid
// MQTT topic name.
var errTopic = errors.New("invalid topic")

// ServeHTTP implements http.Handler: the checks every request passes,
// cheapest first and before its body is read, then one of the two forms.
func (r *Receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	authorized := r.o.Token == "" || bearer.Match(req, r.o.Token)
	if authorized {
		receivers.Admit(req) // its connection no longer counts as pending
	}
	if req.Header.Get("Origin") != "" {
		r.win.Denied.Add(1)
		answerError(w, http.StatusForbidden, "requests from browsers (with an Origin header) are refused")
		return
	}
	if !authorized {
		r.win.Denied.Add(1)
		w.Header().Set("WWW-Authenticate", `Bearer realm="gobridge"`)
		answerError(w, http.StatusUnauthorized, "this receiver needs its token (Authorization: Bearer TOKEN)")
		return
	}
	path := req.URL.EscapedPath()
	batch := path == publishPath
	escapedTopic, single := strings.CutPrefix(path, publishPath+"/")
	switch {
	case !batch && !single:
		answerError(w, http.StatusNotFound, "no such endpoint: POST /v1/publish/{topic} or POST /v1/publish (application/x-ndjson)")
		return
	case req.Method != http.MethodPost:
		w.Header().Set("Allow", http.MethodPost)
		answerError(w, http.StatusMethodNotAllowed, "use POST")
		return
	case !strings.EqualFold(cmp.Or(req.Header.Get("Content-Encoding"), "identity"), "identity"):
		// The body would be kept as sent: compressed bytes under the
		// Content-Type of what they compress.
		r.win.Malformed.Add(1)
		w.Header().Set("Accept-Encoding", "identity")
		answerError(w, http.StatusUnsupportedMediaType, "a Content-Encoding is not supported: send the payload as it is")
		return
	}
	select {
	case r.slots <- struct{}{}:
		defer func() { <-r.slots }()
	default:
		r.win.Busy.Add(1)
		answerError(w, http.StatusServiceUnavailable, fmt.Sprintf("%d requests are already open (max_in_flight)", r.o.MaxInFlight))
		return
	}
	ctx, cancel := context.WithTimeout(req.Context(), r.o.SettleTimeout)
	defer cancel()
	if batch {
		r.serveBatch(ctx, w, req)
		return
	}
	r.servePublish(ctx, w, req, escapedTopic)
}

// servePublish serves POST /v1/publish/{topic...}.
func (r *Receiver) servePublish(ctx context.Context, w http.ResponseWriter, req *http.Request, escapedTopic string) {
	topic, err := DecodeTopic(escapedTopic)
	if err != nil {
		r.win.Malformed.Add(1)
		answerError(w, http.StatusBadRequest, err.Error())
		return
	}
	if !topics.MatchAny(r.o.Topics, topic) {
		r.win.Denied.Add(1)
		answerError(w, http.StatusForbidden, fmt.Sprintf("topic %q is not among this receiver's topics", topic))
		return
	}
	var id string
	if keys := req.Header.Values("Idempotency-Key"); len(keys) > 0 {
		if err := checkKey(keys[0]); err != nil {
			r.win.Malformed.Add(1)
			answerError(w, http.StatusBadRequest, "Idempotency-Key: "+err.Error())
			return
		}
		id = EnvelopeID(r.o.ID, topic, keys[0])
	}
	body, release, ok := r.readBody(ctx, w, req, r.o.MaxPayloadBytes)
	if !ok {
		return
	}
	defer release()
	headers := r.headers(req, req.Header.Get("Content-Type"))
	p := &pending{msg: receivers.Message{Topic: topic, Payload: body, ID: id, Headers: headers}}
	r.publish(ctx, []*pending{p})
	res := p.result()
	answerJSON(w, res.Status, res)
}

// readBody reads req's body, at most limit bytes, after taking room for it
// in the MaxInflightBytes window (waiting up to ctx); release gives the
// room back. When ok is false the request was answered (413, 503, 400).
func (r *Receiver) readBody(ctx context.Context, w http.ResponseWriter, req *http.Request, limit int) (body []byte, release func(), ok bool) {
	if req.ContentLength > int64(limit) {
		r.win.TooLarge.Add(1)
		answerError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("the body has %d bytes; the limit is %d", req.ContentLength, limit))
		return nil, nil, false
	}
	want := int64(limit)
	if req.ContentLength >= 0 {
		want = req.ContentLength
	}
	if r.win.Hold(ctx, want) != nil {
		r.win.Busy.Add(1)
		answerError(w, http.StatusServiceUnavailable, fmt.Sprintf("no room within max_inflight_bytes (%d) in time", r.o.MaxInflightBytes))
		return nil, nil, false
	}
	// The server's deadlines run from the request's start: a body that
	// waited for room would fail to arrive (a 400 for a sound request), or
	// its answer to be written. It gets them afresh from here.
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Now().Add(r.o.ReadTimeout))
	_ = rc.SetWriteDeadline(time.Now().Add(r.o.WriteTimeout))
	body, err := readAll(http.MaxBytesReader(w, req.Body, int64(limit)), limit, want)
	if err != nil {
		r.win.Release(want)
		if errors.As(err, new(*http.MaxBytesError)) {
			r.win.TooLarge.Add(1)
			answerError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("the body is over the limit of %d bytes", limit))
		} else {
			r.win.Malformed.Add(1)
			answerError(w, http.StatusBadRequest, "read body: "+err.Error())
		}
		return nil, nil, false
	}
	// Keep only what the body holds.
	held := min(int64(len(body)), want)
	r.win.Release(want - held)
	return body, func() { r.win.Release(held) }, true
}

// readAll reads rd to its end into a buffer of at most limit+1 bytes (its
// capacity grows by doubling, capped there), so that a limited reader
// (http.MaxBytesReader) can report a body over limit without more memory.
func readAll(rd io.Reader, limit int, sizeHint int64) ([]byte, error) {
	buf := make([]byte, 0, min(max(sizeHint+1, 512), 64<<10, int64(limit)+1))
	for {
		if len(buf) == cap(buf) {
			if cap(buf) > limit {
				return buf, &http.MaxBytesError{Limit: int64(limit)}
			}
			nb := make([]byte, len(buf), min(2*cap(buf), limit+1))
			copy(nb, buf)
			buf = nb
		}
		n, err := rd.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return buf, err
		}
	}
}

// pending is one message handed (or to be handed) to the sink, with what
// its request is answered.
type pending struct {
	msg     receivers.Message
	done    chan struct{} // nil: not handed to the sink
	settled receivers.Settled
	// failure, when set, answers the message without handing it over.
	failure *result
}

// result is the answer for one message (the body of a single publish, a
// line of a batch's answer).
type result struct {
	Line    int    `json:"line,omitempty"`
	Status  int    `json:"status"`
	ID      string `json:"id,omitempty"`
	Outcome string `json:"outcome,omitempty"`
	Error   string `json:"error,omitempty"`
}

// result is p's answer; call it after publish.
func (p *pending) result() result {
	if p.failure != nil {
		return *p.failure
	}
	select {
	case <-p.done:
	default:
		return result{Status: http.StatusServiceUnavailable, ID: p.msg.ID,
			Error: "not settled in time; it may still be committed: retry with the same Idempotency-Key"}
	}
	res := result{Status: http.StatusOK, ID: p.settled.ID, Outcome: p.settled.Outcome}
	if res.Outcome == receivers.OutcomeUnrouted {
		res.Status, res.Error = http.StatusNotFound, "no route takes this topic"
	}
	return res
}

// publish hands the messages without a failure to the sink one after the
// other, in the caller's goroutine, then waits until each is settled or ctx
// ends. A message Accept did not take before ctx ended is not handed on.
func (r *Receiver) publish(ctx context.Context, ps []*pending) {
	now := time.Now()
	for _, p := range ps {
		if p.failure != nil || ctx.Err() != nil {
			continue
		}
		p.done = make(chan struct{})
		p.msg.Receiver, p.msg.QoS, p.msg.ReceivedAt, p.msg.Size = r.o.ID, 1, now, len(p.msg.Payload)
		p.msg.Report = func(s receivers.Settled) { p.settled = s }
		r.win.Received.Add(1)
		r.win.InFlight.Add(1)
		r.sink.Accept(ctx, p.msg, func() { close(p.done) })
	}
	for _, p := range ps {
		if p.done == nil {
			continue
		}
		select {
		case <-p.done:
		case <-ctx.Done():
		}
		r.win.InFlight.Add(-1)
		select {
		case <-p.done:
			r.win.Acked.Add(1)
		default:
			r.win.Abandoned.Add(1)
		}
	}
}

// headers are a message's headers: those of req named in Options.Headers,
// and Content-Type when contentType is set.
func (r *Receiver) headers(req *http.Request, contentType string) map[string]string {
	h := make(map[string]string, len(r.o.Headers)+1)
	for _, name := range r.o.Headers {
		if v := req.Header.Get(name); v != "" {
			h[name] = v
		}
	}
	if contentType != "" {
		h["Content-Type"] = contentType
	}
	return h
}

// DecodeTopic turns the escaped path after /v1/publish/ into an MQTT topic
// name: each segment is URL-decoded (%2F decodes to a level separator) and
// the result must be a valid topic name: not empty, at most 65535 bytes of
// UTF-8 without NUL, no wildcard (+ or #). Errors wrap errTopic.
func DecodeTopic(escaped string) (string, error) {
	topic, err := url.PathUnescape(escaped)
	if err != nil {
		return "", fmt.Errorf("%w: %v", errTopic, err)
	}
	if err := validTopic(topic); err != nil {
		return "", err
	}
	return topic, nil
}

func validTopic(topic string) error {
	switch {
	case topic == "":
		return fmt.Errorf("%w: empty", errTopic)
	case len(topic) > 65535:
		return fmt.Errorf("%w: longer than 65535 bytes", errTopic)
	case !utf8.ValidString(topic) || strings.ContainsRune(topic, 0):
		return fmt.Errorf("%w: %q is not valid UTF-8 or contains NUL", errTopic, topic)
	case strings.ContainsAny(topic, "+#"):
		return fmt.Errorf("%w: %q: a topic name has no wildcards (+, #)", errTopic, topic)
	}
	return nil
}

func checkKey(key string) error {
	switch {
	case key == "":
		return errors.New("empty")
	case len(key) > MaxIdempotencyKey:
		return fmt.Errorf("longer than %d bytes", MaxIdempotencyKey)
	}
	return nil
}

// answerJSON answers v with status; a 503 says when to retry.
func answerJSON(w http.ResponseWriter, status int, v any) {
	if status == http.StatusServiceUnavailable {
		setRetryAfter(w)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func answerError(w http.ResponseWriter, status int, msg string) {
	answerJSON(w, status, failure(status, msg))
}

// MaxErrorText is the longest error text an answer (or a batch line's
// result) carries, in bytes: the text quotes what the client sent (a
// topic, an unknown field), so a batch of long bad lines is not answered
// with several times its size.
const MaxErrorText = 256

// failure is a refusal's result, its text clipped to MaxErrorText bytes
// (on a UTF-8 boundary, "..." marking the cut).
func failure(status int, msg string) *result {
	if len(msg) > MaxErrorText {
		n := MaxErrorText - len("...")
		for n > 0 && !utf8.RuneStart(msg[n]) {
			n--
		}
		msg = msg[:n] + "..."
	}
	return &result{Status: status, Error: msg}
}

func setRetryAfter(w http.ResponseWriter) {
	w.Header().Set("Retry-After", strconv.Itoa(int(RetryAfter/time.Second)))
}
