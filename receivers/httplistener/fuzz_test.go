package httplistener

import (
	"bytes"
	"encoding/json"
	"errors"
	"github.com/gobridge/gobridge/receivers"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
)

// FuzzDecodeTopic: decoding never panics, what it accepts is a valid topic
// name, and every valid topic name, escaped level by level, decodes to
// itself.
func FuzzDecodeTopic(f *testing.F) {
	for _, s := range []string{"plant/a", "plant/line%201/temp", "a//b", "/a/", "%2B", "a%2Fb", "%zz", "é/%C3%A9", "a%00", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, escaped string) {
		topic, err := DecodeTopic(escaped)
		if err != nil {
			if !errors.Is(err, errTopic) {
				t.Fatalf("error %v does not wrap errTopic", err)
			}
		} else if validTopic(topic) != nil {
			t.Fatalf("DecodeTopic(%q) = %q, not a valid topic", escaped, topic)
		}
		if validTopic(escaped) != nil {
			return
		}
		levels := strings.Split(escaped, "/")
		for i, l := range levels {
			levels[i] = url.PathEscape(l)
		}
		back, err := DecodeTopic(strings.Join(levels, "/"))
		if err != nil || back != escaped {
			t.Fatalf("topic %q escaped and decoded: %q, %v", escaped, back, err)
		}
	})
}

// FuzzParseLine: parsing never panics; an accepted line has a valid topic,
// a payload within what the line can carry, and a line made again from
// what was parsed parses to the same.
func FuzzParseLine(f *testing.F) {
	for _, s := range []string{
		`{"topic":"plant/a","payload":{"t":1}}`,
		`{"topic":"plant/a","payload_base64":"AAEC","idempotency_key":"k"}`,
		`{"topic":"plant/a","payload":null}`,
		`{"topic":"plant/a","payload":"x"} 1`,
		`{"topic":"a/+","payload":1}`,
		`{"topic":"a","payload":1,"payload_base64":""}`,
		`{"topic":"a","payload":[1,2,{"b":"\u0000"}],"idempotency_key":""}`,
		`[]`, `{`, `null`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		l, err := ParseLine(line)
		if err != nil {
			return
		}
		if validTopic(l.Topic) != nil {
			t.Fatalf("accepted topic %q", l.Topic)
		}
		if len(l.Payload) > len(line) {
			t.Fatalf("payload of %d bytes from a line of %d", len(l.Payload), len(line))
		}
		again := map[string]any{"topic": l.Topic}
		if l.JSON {
			again["payload"] = json.RawMessage(l.Payload)
		} else {
			again["payload_base64"] = l.Payload // []byte marshals as base64
		}
		if l.Key != "" {
			again["idempotency_key"] = l.Key
		}
		b, err := json.Marshal(again)
		if err != nil {
			t.Fatalf("marshal %+v: %v", l, err)
		}
		l2, err := ParseLine(b)
		if err != nil || l2.Topic != l.Topic || l2.Key != l.Key || l2.JSON != l.JSON ||
			(!l.JSON && string(l2.Payload) != string(l.Payload)) {
			t.Fatalf("%s parsed as %+v, made again as %s: %+v, %v", line, l, b, l2, err)
		}
	})
}

// FuzzSplitLines: splitting keeps every non-blank line, in order, with its
// number as bytes.Split counts it, up to max; over says whether more came.
func FuzzSplitLines(f *testing.F) {
	for _, s := range []string{"a\nb", "\n\n", "a\r\n\r\nb\n", " \n\t\r\n x", "a\rb\n", ""} {
		f.Add([]byte(s), uint8(2))
	}
	f.Fuzz(func(t *testing.T, body []byte, m uint8) {
		limit := int(m)
		lines, numbers, over := SplitLines(body, limit)
		var want [][]byte
		var wantN []int
		for i, l := range bytes.Split(body, []byte("\n")) {
			if l = bytes.TrimSuffix(l, []byte("\r")); len(bytes.TrimSpace(l)) > 0 {
				want, wantN = append(want, l), append(wantN, i+1)
			}
		}
		if over != (len(want) > limit) || len(lines) != min(len(want), limit) || len(numbers) != len(lines) {
			t.Fatalf("%q, max %d: %d lines, over %v; want %d", body, limit, len(lines), over, len(want))
		}
		for i := range lines {
			if !bytes.Equal(lines[i], want[i]) || numbers[i] != wantN[i] {
				t.Fatalf("%q: line %d = %q (number %d), want %q (%d)", body, i, lines[i], numbers[i], want[i], wantN[i])
			}
		}
	})
}

// FuzzServeHTTP sends arbitrary methods, paths, Authorization headers and
// bodies to a receiver: it never panics, answers JSON with a known status,
// and hands a message on (200) only with the token, to an allowed topic.
func FuzzServeHTTP(f *testing.F) {
	for _, s := range [][3]string{
		{"/v1/publish/plant/a", "Bearer " + testToken, "x"},
		{"/v1/publish", "bearer  " + testToken + " ", `{"topic":"plant/a","payload":1}` + "\n" + `{"topic":"x","payload":1}`},
		{"/v1/publish/plant%2Fa", "Bearer " + testToken + "x", ""},
		{"/v1/publish/other/a", "Bearer " + testToken, "x"},
		{"/v1/publish/%zz", "Basic " + testToken, "x"},
	} {
		f.Add("POST", s[0], s[1], []byte(s[2]))
	}
	sink := newSettlingSink(receivers.OutcomeCommitted, false)
	r, err := New(Options{ID: "web", Topics: []string{"plant/#"}, Token: testToken, MaxBatchLines: 10, MaxBatchBytes: 4096, MaxPayloadBytes: 1024}, sink, nil)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, method, target, auth string, body []byte) {
		req, err := http.NewRequest(method, "http://127.0.0.1"+target, bytes.NewReader(body))
		if err != nil {
			return
		}
		req.Header.Set("Authorization", auth)
		req.Header.Set("Content-Type", "application/x-ndjson")
		rec := httptest.NewRecorder()
		r.ServeHTTP(rec, req)
		switch rec.Code {
		case 200, 400, 401, 403, 404, 405, 413, 415:
		default:
			t.Fatalf("%s %s: status %d", method, target, rec.Code)
		}
		if !json.Valid(rec.Body.Bytes()) {
			t.Fatalf("%s %s: answer %d is not JSON: %q", method, target, rec.Code, rec.Body)
		}
		scheme, tok, _ := strings.Cut(strings.TrimSpace(auth), " ")
		authorized := strings.EqualFold(scheme, "bearer") && strings.TrimSpace(tok) == testToken
		for len(sink.got) > 0 {
			m := <-sink.got
			if !authorized || (m.Topic != "plant" && !strings.HasPrefix(m.Topic, "plant/")) || len(m.Payload) > 1024 {
				t.Fatalf("handed on %q (%d bytes) with Authorization %q", m.Topic, len(m.Payload), auth)
			}
		}
	})
}
