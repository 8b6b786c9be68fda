package sqs

import (
	"testing"

	"github.com/gobridge/gobridge/message"
	"github.com/gobridge/gobridge/routes"
)

// FuzzBuild checks that any envelope either becomes an entry within the SQS
// limits or fails with a *MessageError, and never panics.
func FuzzBuild(f *testing.F) {
	f.Add("id-1", "factory/line-7/t", []byte(`{"k":"v"}`), "site", "north")
	f.Add(string(make([]byte, 200)), "", []byte{0xff}, "AWS.x", "")
	f.Add("x", "a//b", []byte("\x00"), "a..b", "\ufffe")
	s := offlineSender(f, routes.SenderOptions{QueueURL: "https://sqs.eu-west-1.amazonaws.com/1/q.fifo", MessageGroupID: "{topic.1}", Attributes: map[string]string{"h": "{header.site}"}})
	f.Fuzz(func(t *testing.T, id, topic string, payload []byte, hk, hv string) {
		e := &message.Envelope{ID: id, Topic: topic, Payload: payload, Headers: map[string]string{hk: hv}}
		en, err := s.build(3, e)
		if err != nil {
			if _, ok := err.(*MessageError); !ok {
				t.Fatalf("error %T %v is not a *MessageError", err, err)
			}
			return
		}
		if en.size > MaxMessageBytes || len(en.req.MessageAttributes) > MaxAttributes || !validFIFOID(*en.req.MessageDeduplicationId) || *en.req.MessageGroupId == "" {
			t.Fatalf("entry outside the limits: %+v", en)
		}
		if invalidChar([]byte(*en.req.MessageBody)) >= 0 {
			t.Fatalf("body with a character SQS refuses was accepted")
		}
	})
}
