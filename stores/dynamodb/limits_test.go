package dynamodb_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gobridge/gobridge/message"
	"github.com/gobridge/gobridge/stores"
)

// Keys made from message data are hashed in the table's keys, so long
// ones work: a 3 KB topic as ordering key, a 3 KB coalesce key, a 1 KB
// envelope ID (DynamoDB refuses a partition key over 2048 bytes and a sort
// key over 1024).
func TestWrite_LongKeys(t *testing.T) {
	t.Parallel()
	s := open(t, nil)
	ctx := t.Context()
	session := uniqueName("long-")
	topic := "plant/" + strings.Repeat("t", 3000)
	mk := func(id string, recv time.Duration) stores.Record {
		return stores.Record{Session: session, Route: "r", CoalesceKey: strings.Repeat("c", 3000) + "/" + topic,
			Envelope: message.Envelope{ID: id, Topic: topic, Key: topic, Payload: []byte("x"), ReceivedAt: t0.Add(recv)}}
	}
	a, b := mk(strings.Repeat("a", 1024), 0), mk(strings.Repeat("b", 1024), time.Second)
	for _, r := range []stores.Record{a, b} {
		batch := stores.Batch{Append: []stores.Record{r}}
		if err := s.Write(ctx, &batch); err != nil || batch.Append[0].Seq == 0 {
			t.Fatalf("Write: %v, seq %d", err, batch.Append[0].Seq)
		}
	}
	le, err := s.Acquire(ctx, stores.PartitionLease(session, 0), "o", time.Minute, t0)
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.Claim(ctx, stores.ClaimRequest{Session: session, Token: le.Token, Limit: 10})
	if err != nil || len(got) != 1 {
		t.Fatalf("Claim = %d records, %v; want b alone (it coalesced a away)", len(got), err)
	}
	if g := got[0]; g.Envelope.ID != b.Envelope.ID || g.Envelope.Topic != topic || g.Envelope.Key != topic || g.CoalesceKey != b.CoalesceKey {
		t.Errorf("claimed record lost its long fields: id %d bytes, topic %d, key %d", len(g.Envelope.ID), len(g.Envelope.Topic), len(g.Envelope.Key))
	}
	batch := stores.Batch{Settle: []stores.Settlement{{Key: b.Key(), Token: le.Token, Outcome: stores.DeadLetter, Reason: "x"}}}
	if err := s.Write(ctx, &batch); err != nil || batch.Settle[0].Stale {
		t.Fatalf("dead-letter: %v, stale %v", err, batch.Settle[0].Stale)
	}
	if d, _, err := s.Dead(ctx, stores.DeadQuery{ID: b.Envelope.ID}); err != nil || len(d) != 1 {
		t.Fatalf("Dead by a 1 KB ID = %d, %v", len(d), err)
	}
	again := stores.Batch{Append: []stores.Record{a, b}}
	if err := s.Write(ctx, &again); err != nil || again.Append[0].Seq != 0 || again.Append[1].Seq != 0 {
		t.Fatalf("re-append of a long-keyed tombstone and dead letter: %v, seqs %d %d", err, again.Append[0].Seq, again.Append[1].Seq)
	}
}

// A record DynamoDB cannot hold is ErrInvalid and nothing of its batch is
// written; one it can (350 KB) is appended whole.
func TestWrite_ItemSizeLimit(t *testing.T) {
	t.Parallel()
	s := open(t, nil)
	ctx := t.Context()
	session := uniqueName("size-")
	rec := func(size int) stores.Record {
		return stores.Record{Session: session, Route: "r",
			Envelope: message.Envelope{ID: message.NewID(), Topic: "t", Payload: []byte(strings.Repeat("p", size))}}
	}
	small, big := rec(10), rec(500_000)
	b := stores.Batch{Append: []stores.Record{small, big}}
	if err := s.Write(ctx, &b); !errors.Is(err, stores.ErrInvalid) {
		t.Fatalf("Write of a 500 KB record = %v, want ErrInvalid", err)
	}
	fine := rec(350_000)
	b = stores.Batch{Append: []stores.Record{fine}}
	if err := s.Write(ctx, &b); err != nil {
		t.Fatalf("Write of a 350 KB record: %v", err)
	}
	le, err := s.Acquire(ctx, stores.PartitionLease(session, 0), "o", time.Minute, t0)
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.Claim(ctx, stores.ClaimRequest{Session: session, Token: le.Token, Limit: 10})
	if err != nil || len(got) != 1 || got[0].Envelope.ID != fine.Envelope.ID || len(got[0].Envelope.Payload) != 350_000 {
		t.Fatalf("Claim = %d records, %v; want the 350 KB one alone (nothing of the refused batch)", len(got), err)
	}
	// Dead-lettering it copies it whole, with a long reason.
	b = stores.Batch{Settle: []stores.Settlement{{Key: fine.Key(), Token: le.Token, Outcome: stores.DeadLetter, Reason: strings.Repeat("r", 100_000)}}}
	if err := s.Write(ctx, &b); err != nil || b.Settle[0].Stale {
		t.Fatalf("dead-letter a 350 KB record: %v, stale %v", err, b.Settle[0].Stale)
	}
	if d, _, err := s.Dead(ctx, stores.DeadQuery{ID: fine.Envelope.ID}); err != nil || len(d[0].Envelope.Payload) != 350_000 {
		t.Fatalf("Dead = %v", err)
	}
	// The engine dead-letters a refused record truncated: that one fits.
	tr := stores.Truncate(big, "store refused it", t0)
	b = stores.Batch{Append: []stores.Record{tr}}
	if err := s.Write(ctx, &b); err != nil || b.Append[0].Seq == 0 {
		t.Fatalf("Write of the truncated dead letter: %v", err)
	}
	if st, err := s.Stats(context.Background()); err != nil || len(st) == 0 {
		t.Fatalf("Stats: %v", err)
	}
}
