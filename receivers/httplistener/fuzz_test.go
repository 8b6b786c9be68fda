package httplistener

import (
	"encoding/json"
	"errors"
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
