package dynamodb_test

import (
	"strings"
	"testing"
	"time"

	"github.com/gobridge/gobridge/message"
	"github.com/gobridge/gobridge/stores"
)

// The largest record the listener lets through (a payload at the default
// max_payload_bytes, a 64 KiB topic, long MQTT 5 user properties) is
// stored whole; 60 of them in one Write (about 20 MB: many transactions
// under DynamoDB's 4 MB, and reads over BatchGetItem's 16 MB when they are
// dead-lettered together), and a batch of 512 appends and their 512
// settlements, each in one Write.
func TestWrite_LargeBatches(t *testing.T) {
	t.Parallel()
	s := open(t, nil)
	ctx := t.Context()
	session := uniqueName("sizes-")
	le, err := s.Acquire(ctx, stores.PartitionLease(session, 0), "o", time.Minute, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	headers := map[string]string{}
	for i := range 30 {
		headers[strings.Repeat(string(rune('a'+i%26)), 10)+string(rune('0'+i/26))] = strings.Repeat("v", 60)
	}
	big := func() stores.Record {
		return stores.Record{Session: session, Route: "r", Token: le.Token, Envelope: message.Envelope{ID: message.NewID(),
			Topic: "plant/" + strings.Repeat("t", 65535-6), Payload: make([]byte, 262144), Headers: headers}}
	}
	small := func() stores.Record {
		return stores.Record{Session: session, Route: "r", Token: le.Token,
			Envelope: message.Envelope{ID: message.NewID(), Topic: "t", Payload: []byte("x")}}
	}
	for _, tc := range []struct {
		name string
		n    int
		rec  func() stores.Record
	}{{"60 of the largest", 60, big}, {"512 small", 512, small}} {
		var b stores.Batch
		for range tc.n {
			b.Append = append(b.Append, tc.rec())
		}
		if err := s.Write(ctx, &b); err != nil {
			t.Fatalf("%s: append: %v", tc.name, err)
		}
		var settle stores.Batch
		for i, r := range b.Append {
			if r.Seq == 0 || r.Token != le.Token {
				t.Fatalf("%s: record %d: Seq %d, Token %d", tc.name, i, r.Seq, r.Token)
			}
			settle.Settle = append(settle.Settle, stores.Settlement{Key: r.Key(), Token: le.Token,
				Outcome: stores.DeadLetter, Reason: strings.Repeat("refused ", 1000), Attempts: 1})
		}
		if err := s.Write(ctx, &settle); err != nil {
			t.Fatalf("%s: dead-letter them in one Write: %v", tc.name, err)
		}
		for _, st := range settle.Settle {
			if st.Stale {
				t.Fatalf("%s: settlement of %s stale", tc.name, st.ID)
			}
		}
		d, _, err := s.Dead(ctx, stores.DeadQuery{ID: b.Append[tc.n-1].Envelope.ID})
		if err != nil || len(d) != 1 || len(d[0].Envelope.Topic) != len(b.Append[0].Envelope.Topic) || len(d[0].Envelope.Headers) != len(b.Append[0].Envelope.Headers) {
			t.Fatalf("%s: the last dead letter: %d, %v", tc.name, len(d), err)
		}
	}
	st, err := s.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, ss := range st {
		if ss.Session == session && (ss.Live != 0 || ss.Routes["r"].Dead != 572) {
			t.Errorf("Stats = %+v; want 0 live, 572 dead", ss)
		}
	}
}
