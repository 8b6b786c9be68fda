package sqs

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/gobridge/gobridge/message"
	"github.com/gobridge/gobridge/routes"
)

func offlineSender(t testing.TB, o routes.SenderOptions) *Sender {
	t.Helper()
	t.Setenv("AWS_ACCESS_KEY_ID", "test")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "test")
	if o.QueueURL == "" {
		o.QueueURL = "https://sqs.eu-west-1.amazonaws.com/123456789012/q"
	}
	s, err := New(context.Background(), routes.SenderConfig{ID: "t", Options: o}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestSender_LimitsArePermanentWithReason(t *testing.T) {
	s := offlineSender(t, routes.SenderOptions{Attributes: map[string]string{"a": "1"}})
	many := map[string]string{}
	for i := range 9 {
		many[fmt.Sprintf("h%d", i)] = "v"
	}
	cases := map[string]struct {
		env    *message.Envelope
		reason string
	}{
		"too large":          {&message.Envelope{ID: "1", Payload: []byte(strings.Repeat("x", MaxMessageBytes-20))}, "SQS allows at most 262144"},
		"too many attrs":     {&message.Envelope{ID: "2", Payload: []byte("x"), Headers: many}, "11 message attributes"},
		"bad header name":    {&message.Envelope{ID: "3", Payload: []byte("x"), Headers: map[string]string{"my header": "v"}}, `header "my header"`},
		"reserved header":    {&message.Envelope{ID: "4", Payload: []byte("x"), Headers: map[string]string{"AWS.trace": "v"}}, "reserved"},
		"empty header value": {&message.Envelope{ID: "5", Payload: []byte("x"), Headers: map[string]string{"h": ""}}, "attribute h is empty"},
		"empty payload":      {&message.Envelope{ID: "6"}, "empty payload"},
		"control character":  {&message.Envelope{ID: "7", Payload: []byte("a\x01b")}, "payload byte 1"},
		"invalid UTF-8":      {&message.Envelope{ID: "8", Payload: []byte{'a', 0xc3}}, "payload byte 1"},
	}
	for name, c := range cases {
		_, err := s.build(0, c.env)
		var me *MessageError
		if !errors.As(err, &me) || !strings.Contains(me.Reason, c.reason) {
			t.Errorf("%s: %v, want a reason containing %q", name, err, c.reason)
		}
	}
	// Exactly at the limit: body + "a"+"String"+"1" + "gobridge-id"+"String"+ID.
	id := "x"
	body := MaxMessageBytes - (1 + 6 + 1) - (len(IDAttribute) + 6 + len(id))
	en, err := s.build(0, &message.Envelope{ID: id, Payload: []byte(strings.Repeat("b", body))})
	if err != nil || en.size != MaxMessageBytes {
		t.Errorf("a message of exactly %d bytes: size %d, err %v", MaxMessageBytes, en.size, err)
	}
	if _, err := s.build(0, &message.Envelope{ID: id, Payload: []byte(strings.Repeat("b", body+1))}); err == nil {
		t.Errorf("a message one byte over the limit was accepted")
	}
}

func TestSender_FIFOGroupMustBeValid(t *testing.T) {
	s := offlineSender(t, routes.SenderOptions{QueueURL: "https://sqs.eu-west-1.amazonaws.com/1/q.fifo", MessageGroupID: "{header.line}"})
	for name, env := range map[string]*message.Envelope{
		"missing header": {ID: "1", Payload: []byte("x")},
		"space":          {ID: "2", Payload: []byte("x"), Headers: map[string]string{"line": "a b"}},
		"too long":       {ID: "3", Payload: []byte("x"), Headers: map[string]string{"line": strings.Repeat("g", 129)}},
	} {
		if _, err := s.build(0, env); !errors.As(err, new(*MessageError)) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestNew_RejectsBadConfig(t *testing.T) {
	t.Setenv("AWS_ACCESS_KEY_ID", "test")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "test")
	std, fifo := "https://sqs.eu-west-1.amazonaws.com/1/q", "https://sqs.eu-west-1.amazonaws.com/1/q.fifo"
	ten := map[string]string{}
	for i := range 10 {
		ten[fmt.Sprintf("a%d", i)] = "v"
	}
	for name, o := range map[string]routes.SenderOptions{
		"no queue":            {},
		"fifo without group":  {QueueURL: fifo},
		"group on standard":   {QueueURL: std, MessageGroupID: "g"},
		"bad group template":  {QueueURL: fifo, MessageGroupID: "{topic.x}"},
		"batch too large":     {QueueURL: std, BatchSize: 11},
		"batch negative":      {QueueURL: std, BatchSize: -1},
		"bad attribute name":  {QueueURL: std, Attributes: map[string]string{"a b": "v"}},
		"reserved attribute":  {QueueURL: std, Attributes: map[string]string{IDAttribute: "v"}},
		"too many attributes": {QueueURL: std, Attributes: ten},
		"bad attribute value": {QueueURL: std, Attributes: map[string]string{"a": "{nope}"}},
		"no region derivable": {QueueURL: "http://127.0.0.1:1/0/q", Region: ""},
		// What SQS refuses in a template's literal text fails every message.
		"group with a space":       {QueueURL: fifo, MessageGroupID: "line {topic.1}"},
		"group literal too long":   {QueueURL: fifo, MessageGroupID: strings.Repeat("g", 120) + "-{topic.1}-" + strings.Repeat("g", 10)},
		"group not ASCII":          {QueueURL: fifo, MessageGroupID: "Linie-Süd"},
		"empty attribute":          {QueueURL: std, Attributes: map[string]string{"site": ""}},
		"attribute with a control": {QueueURL: std, Attributes: map[string]string{"site": "{topic.1}\x01"}},
	} {
		if name == "no region derivable" {
			t.Setenv("AWS_REGION", "")
			t.Setenv("AWS_DEFAULT_REGION", "")
			t.Setenv("AWS_CONFIG_FILE", "/nonexistent")
		}
		_, err := New(context.Background(), routes.SenderConfig{ID: name, Options: o}, nil)
		if err == nil {
			t.Errorf("%s: New accepted %+v", name, o)
			continue
		}
		t.Log(err)
	}
	offlineSender(t, routes.SenderOptions{QueueURL: fifo, MessageGroupID: "line-{topic.1}/{header.x}", Attributes: map[string]string{"a": "{header.x} at {topic}"}})
	if s := offlineSender(t, routes.SenderOptions{QueueURL: std}); s.BatchSize() != 10 || s.fifo {
		t.Errorf("defaults: batch %d fifo %v", s.BatchSize(), s.fifo)
	}
}

// TestNew_RegionOfAnAWSQueueURL: SDK v2 sends to the endpoint of its
// region whatever the queue URL says, and SQS answers QueueDoesNotExist
// for a queue of another region: the URL's region wins over AWS_REGION
// (set by ECS and Lambda for the task's own region), and an explicit
// region that contradicts the URL is a config error.
func TestNew_RegionOfAnAWSQueueURL(t *testing.T) {
	t.Setenv("AWS_REGION", "eu-west-1")
	url := "https://sqs.us-east-1.amazonaws.com/123456789012/q"
	if got := offlineSender(t, routes.SenderOptions{QueueURL: url}).client.Options().Region; got != "us-east-1" {
		t.Errorf("region %q with AWS_REGION=eu-west-1, want the queue URL's us-east-1", got)
	}
	if got := offlineSender(t, routes.SenderOptions{QueueURL: "http://127.0.0.1:1/0/q"}).client.Options().Region; got != "eu-west-1" {
		t.Errorf("region %q for a URL naming none, want AWS_REGION's eu-west-1", got)
	}
	vpce := routes.SenderOptions{QueueURL: url, Region: "us-east-1", Endpoint: "https://vpce-1.sqs.us-east-1.vpce.amazonaws.com"}
	if got := offlineSender(t, vpce).client.Options().Region; got != "us-east-1" {
		t.Errorf("region %q through an endpoint, want us-east-1", got)
	}
	if _, err := New(t.Context(), routes.SenderConfig{ID: "x", Options: routes.SenderOptions{QueueURL: url, Region: "eu-west-1"}}, nil); err == nil {
		t.Errorf("New accepted region eu-west-1 for a queue in us-east-1")
	}
}

func TestDeduplicationID(t *testing.T) {
	uuid := message.NewID()
	if DeduplicationID(uuid) != uuid {
		t.Errorf("a UUID must pass unchanged")
	}
	for _, id := range []string{strings.Repeat("a", 129), "with space", "ünïcode", ""} {
		if got := DeduplicationID(id); len(got) != 64 || !validFIFOID(got) {
			t.Errorf("DeduplicationID(%q) = %q", id, got)
		}
	}
	if DeduplicationID("a b") == DeduplicationID("a c") {
		t.Errorf("hashes collide")
	}
}

func TestChunks(t *testing.T) {
	mk := func(sizes ...int) []entry {
		out := make([]entry, len(sizes))
		for i, s := range sizes {
			out[i] = entry{index: i, size: s}
		}
		return out
	}
	count := func(cs [][]entry) []int {
		var n []int
		for _, c := range cs {
			n = append(n, len(c))
		}
		return n
	}
	half := MaxBatchBytes / 2
	for name, c := range map[string]struct {
		entries []entry
		size    int
		want    []int
	}{
		"by count":    {mk(1, 1, 1, 1, 1), 2, []int{2, 2, 1}},
		"by bytes":    {mk(half, half, 1, half), 10, []int{2, 2}},
		"one too big": {mk(MaxBatchBytes, 1), 10, []int{1, 1}},
		"empty":       {nil, 10, nil},
	} {
		if got := count(chunks(c.entries, c.size)); fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("%s: %v, want %v", name, got, c.want)
		}
	}
}
