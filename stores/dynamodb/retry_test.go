package dynamodb_test

import (
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/gobridge/gobridge/message"
	"github.com/gobridge/gobridge/stores"
	"github.com/gobridge/gobridge/stores/dynamodb"
)

// A Write larger than one transaction fails after its first transaction
// committed (DynamoDB refuses the second one), and the engine retries the
// same Batch. The records the first transaction appended come back as
// stored: with their Seq, claimed under the lease, as the owner's drainer
// needs to hold them (its claims skip its own token). Reported as
// duplicates (Seq 0) they stayed undelivered until the lease changed hands.
// Found by review; see Atomicity in the package doc.
func TestWrite_RetryAfterPartialCommit(t *testing.T) {
	t.Parallel()
	s := open(t, nil)
	ctx := t.Context()
	a, b := uniqueName("retry-a-"), uniqueName("retry-b-")
	le, err := s.Acquire(ctx, stores.PartitionLease(a, 0), "o1", time.Minute, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	const n = 60 // more than one transaction holds (about 45)
	var batch stores.Batch
	for range n {
		batch.Append = append(batch.Append, stores.Record{Session: a, Route: "r", Token: le.Token,
			Envelope: message.Envelope{ID: message.NewID(), Topic: "t", Payload: []byte("x")}})
	}
	// Last, in the second transaction: a record of session b, whose stats
	// items are full, so that DynamoDB refuses to update them (400 KB).
	batch.Append = append(batch.Append, stores.Record{Session: b, Route: "r",
		Envelope: message.Envelope{ID: message.NewID(), Topic: "t", Payload: []byte("x")}})
	db, table := newClient(t, nil), sharedTable(t)
	stats := func(shard int) map[string]types.AttributeValue {
		return map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "stats"},
			"sk": &types.AttributeValueMemberS{Value: b + "#" + strconv.Itoa(shard)}}
	}
	for shard := range dynamodb.StatsShards {
		it := stats(shard)
		size := 409_600 - 1 - len("pkstatssk"+b+"#"+strconv.Itoa(shard)+"pad")
		it["pad"] = &types.AttributeValueMemberB{Value: make([]byte, size)}
		if _, err := db.PutItem(ctx, &awsddb.PutItemInput{TableName: aws.String(table), Item: it}); err != nil {
			t.Fatalf("fill stats item: %v", err)
		}
	}
	if err := s.Write(ctx, &batch); !errors.Is(err, stores.ErrInvalid) {
		t.Fatalf("Write: %v; want DynamoDB to refuse its second transaction as invalid (ErrInvalid, not retried)", err)
	}
	first := map[string]int64{}
	for _, r := range batch.Append[:n] {
		if r.Seq != 0 {
			first[r.Envelope.ID] = r.Seq
		}
	}
	if len(first) == 0 || len(first) == n {
		t.Fatalf("the failed Write committed %d of %d records; want its first transaction's", len(first), n)
	}
	for shard := range dynamodb.StatsShards {
		if _, err := db.DeleteItem(ctx, &awsddb.DeleteItemInput{TableName: aws.String(table), Key: stats(shard)}); err != nil {
			t.Fatal(err)
		}
	}

	// The engine retries a Write until it succeeds or is refused as
	// invalid. Under load, DynamoDB Local may answer 500 to an attempt it
	// applied and refuse the SDK's retry of it: a lost answer, which the
	// next Write of the same Batch settles (see lost.go).
	err = s.Write(ctx, &batch)
	for i := 0; i < 3 && err != nil && !errors.Is(err, stores.ErrInvalid); i++ {
		t.Logf("retried Write: %v; writing the Batch again, as the engine does", err)
		err = s.Write(ctx, &batch)
	}
	if err != nil {
		t.Fatalf("retried Write: %v", err)
	}
	seqs := map[string]int64{}
	for i, r := range batch.Append[:n] {
		seqs[r.Envelope.ID] = r.Seq
		if r.Seq == 0 || r.Token != le.Token {
			t.Errorf("record %d after the retry: Seq %d, Token %d; want it appended, claimed under %d", i, r.Seq, r.Token, le.Token)
		}
		if was, ok := first[r.Envelope.ID]; ok && r.Seq != was {
			t.Errorf("record %d: Seq %d after the retry, %d before", i, r.Seq, was)
		}
	}
	// The next owner finds each record once, at the Seq Write reported.
	if err := s.Release(ctx, le); err != nil {
		t.Fatal(err)
	}
	le2, err := s.Acquire(ctx, stores.PartitionLease(a, 0), "o2", time.Minute, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.Claim(ctx, stores.ClaimRequest{Session: a, Token: le2.Token, Limit: 2 * n})
	if err != nil || len(got) != n {
		t.Fatalf("Claim by the next owner = %d records, %v; want %d", len(got), err, n)
	}
	for _, r := range got {
		if seqs[r.Envelope.ID] != r.Seq {
			t.Errorf("record %s stored at Seq %d, reported at %d", r.Envelope.ID, r.Seq, seqs[r.Envelope.ID])
		}
	}
	// Once retried, appending them again is a duplicate, as for any key.
	if err := s.Write(ctx, &batch); err != nil {
		t.Fatal(err)
	}
	for i, r := range batch.Append {
		if r.Seq != 0 {
			t.Errorf("record %d appended a third time: Seq %d, want 0 (a duplicate)", i, r.Seq)
		}
	}
}
