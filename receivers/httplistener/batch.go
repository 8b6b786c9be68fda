package httplistener

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"

	"github.com/gobridge/gobridge/receivers"
	"github.com/gobridge/gobridge/topics"
)

// Line is one parsed line of an NDJSON batch.
type Line struct {
	Topic   string
	Payload []byte
	// Key is the line's idempotency_key; empty when it has none.
	Key string
	// JSON is true when the payload came as "payload" (a JSON value, kept
	// as written), false for "payload_base64".
	JSON bool
}

type wireLine struct {
	Topic          *string         `json:"topic"`
	Payload        json.RawMessage `json:"payload"`
	PayloadBase64  *string         `json:"payload_base64"`
	IdempotencyKey *string         `json:"idempotency_key"`
}

// ParseLine parses one batch line: a JSON object with "topic" and exactly
// one of "payload" (any JSON value; the payload is its text as written,
// so a string keeps its quotes) or "payload_base64" (standard base64), and
// optionally "idempotency_key". Unknown fields are an error, as is
// anything after the object. The topic is checked as a topic name.
func ParseLine(line []byte) (Line, error) {
	var wl wireLine
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&wl); err != nil {
		return Line{}, fmt.Errorf("not a JSON object of the batch form: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return Line{}, errors.New("text after the JSON object on the line")
	}
	switch {
	case wl.Topic == nil:
		return Line{}, errors.New("topic is required")
	case (wl.Payload == nil) == (wl.PayloadBase64 == nil):
		return Line{}, errors.New("set exactly one of payload and payload_base64")
	}
	l := Line{JSON: wl.Payload != nil, Payload: []byte(wl.Payload)}
	if wl.PayloadBase64 != nil {
		p, err := base64.StdEncoding.DecodeString(*wl.PayloadBase64)
		if err != nil {
			return Line{}, fmt.Errorf("payload_base64: %w", err)
		}
		l.Payload = p
	}
	if wl.IdempotencyKey != nil {
		if err := checkKey(*wl.IdempotencyKey); err != nil {
			return Line{}, fmt.Errorf("idempotency_key: %w", err)
		}
		l.Key = *wl.IdempotencyKey
	}
	if err := validTopic(*wl.Topic); err != nil {
		return Line{}, err
	}
	l.Topic = *wl.Topic
	return l, nil
}

// SplitLines splits an NDJSON body into its lines (without the line
// ending, "\n" or "\r\n"), with their 1-based numbers; blank lines are
// skipped. It keeps at most max lines and reports over when the body has
// more: a body of many short (or blank) lines costs no more than max.
func SplitLines(body []byte, max int) (lines [][]byte, numbers []int, over bool) {
	for n := 1; len(body) > 0; n++ {
		var l []byte
		l, body, _ = bytes.Cut(body, []byte("\n"))
		l = bytes.TrimSuffix(l, []byte("\r"))
		if len(bytes.TrimSpace(l)) == 0 {
			continue
		}
		if len(lines) == max {
			return lines, numbers, true
		}
		lines = append(lines, l)
		numbers = append(numbers, n)
	}
	return lines, numbers, false
}

// serveBatch serves POST /v1/publish: every line is checked on its own, the
// valid ones are handed to the sink in order, and the answer (200 once the
// body was read) lists one result per non-blank line.
func (r *Receiver) serveBatch(ctx context.Context, w http.ResponseWriter, req *http.Request) {
	if mt, _, _ := mime.ParseMediaType(req.Header.Get("Content-Type")); mt != "application/x-ndjson" {
		r.win.Malformed.Add(1)
		answerError(w, http.StatusUnsupportedMediaType, "POST /v1/publish takes Content-Type: application/x-ndjson (one message a line); POST /v1/publish/{topic} takes one message")
		return
	}
	body, release, ok := r.readBody(ctx, w, req, r.o.MaxBatchBytes)
	if !ok {
		return
	}
	defer release()
	lines, numbers, over := SplitLines(body, r.o.MaxBatchLines)
	if over {
		r.win.TooLarge.Add(1)
		answerError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("more than %d lines (max_batch_lines)", r.o.MaxBatchLines))
		return
	}
	ps := make([]*pending, len(lines))
	for i, raw := range lines {
		p := &pending{}
		ps[i] = p
		l, err := ParseLine(raw)
		switch {
		case err != nil:
			r.win.Malformed.Add(1)
			p.failure = failure(http.StatusBadRequest, err.Error())
		case !topics.MatchAny(r.o.Topics, l.Topic):
			r.win.Denied.Add(1)
			p.failure = failure(http.StatusForbidden, fmt.Sprintf("topic %q is not among this receiver's topics", l.Topic))
		case len(l.Payload) > r.o.MaxPayloadBytes:
			r.win.TooLarge.Add(1)
			p.failure = failure(http.StatusRequestEntityTooLarge,
				fmt.Sprintf("the payload has %d bytes; the limit is %d", len(l.Payload), r.o.MaxPayloadBytes))
		default:
			contentType := ""
			if l.JSON {
				contentType = "application/json"
			}
			p.msg = receivers.Message{Topic: l.Topic, Payload: l.Payload, Headers: r.headers(req, contentType)}
			if l.Key != "" {
				p.msg.ID = EnvelopeID(r.o.ID, l.Topic, l.Key)
			}
		}
	}
	r.publish(ctx, ps)
	out := struct {
		Results []result `json:"results"`
	}{Results: make([]result, len(ps))}
	for i, p := range ps {
		out.Results[i] = p.result()
		out.Results[i].Line = numbers[i]
		if out.Results[i].Status == http.StatusServiceUnavailable {
			setRetryAfter(w)
		}
	}
	answerJSON(w, http.StatusOK, out)
}
