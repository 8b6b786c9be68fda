package dynamodb_test

import (
	"errors"
	"net/http"
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

// lateDate makes DynamoDB's answers say it is behind by skew: the clock of
// the process using it runs ahead of DynamoDB's (and of other processes').
type lateDate struct{ skew time.Duration }

func (l lateDate) RoundTrip(r *http.Request) (*http.Response, error) {
	res, err := http.DefaultTransport.RoundTrip(r)
	if err == nil {
		if at, perr := http.ParseTime(res.Header.Get("Date")); perr == nil {
			res.Header.Set("Date", at.Add(-l.skew).UTC().Format(http.TimeFormat))
		}
	}
	return res, err
}

// Two instances whose clocks disagree by 20 s share a partition lease
// (ttl 30 s). Halfway through A's lease, B's clock already reads past its
// end: B must not take it, as A is still draining (and sending) under it.
// Lease times are kept in DynamoDB's clock (its Date header), so that the
// skew between instances does not move a lease's end.
func TestLease_ClockSkewBetweenInstances(t *testing.T) {
	t.Parallel()
	const skew, ttl = 20 * time.Second, 30 * time.Second
	a := open(t, nil)
	b, err := dynamodb.Open(t.Context(), dynamodb.Options{Table: sharedTable(t),
		Client: newClient(t, nil, func(o *awsddb.Options) { o.HTTPClient = &http.Client{Transport: lateDate{skew}} })})
	if err != nil {
		t.Fatal(err)
	}
	name := stores.PartitionLease(uniqueName("skew-"), 0)
	start := time.Now()
	if _, err := a.Acquire(t.Context(), name, "a", ttl, start); err != nil {
		t.Fatal(err)
	}
	// 15 s later, by B's clock (20 s ahead).
	if le, err := b.Acquire(t.Context(), name, "b", ttl, start.Add(skew+ttl/2)); !errors.Is(err, stores.ErrLeaseHeld) {
		t.Fatalf("B's Acquire halfway through A's lease = %+v, %v; want ErrLeaseHeld", le, err)
	}
	if got, err := b.List(t.Context(), name, start.Add(skew+ttl/2)); err != nil || len(got) != 1 || got[0].Owner != "a" {
		t.Fatalf("B's List = %+v, %v; want A's lease, live", got, err)
	}
	// Once A's lease is over by both clocks, B takes it.
	if _, err := b.Acquire(t.Context(), name, "b", ttl, start.Add(skew+ttl+5*time.Second)); err != nil {
		t.Fatalf("B's Acquire after A's lease ended: %v", err)
	}
}

// slowAnswers delivers DynamoDB's answers late, with their Date as sent.
type slowAnswers struct{ delay time.Duration }

func (l slowAnswers) RoundTrip(r *http.Request) (*http.Response, error) {
	res, err := http.DefaultTransport.RoundTrip(r)
	time.Sleep(l.delay) // the answer in flight (a loaded machine or network)
	return res, err
}

// Answers that arrive late are no clock skew: A's clock is DynamoDB's,
// but its answers take 2.5 s. Its lease must end, by B's clock (also
// DynamoDB's), when A's does: the lease was stored 2.5 s short, and B took
// it while A still drained under it.
func TestLease_SlowAnswersAreNoClockSkew(t *testing.T) {
	t.Parallel()
	const ttl = 30 * time.Second
	a, err := dynamodb.Open(t.Context(), dynamodb.Options{Table: sharedTable(t),
		Client: newClient(t, nil, func(o *awsddb.Options) { o.HTTPClient = &http.Client{Transport: slowAnswers{2500 * time.Millisecond}} })})
	if err != nil {
		t.Fatal(err)
	}
	b := open(t, nil)
	name := stores.PartitionLease(uniqueName("slow-"), 0)
	start := time.Now()
	if _, err := a.Acquire(t.Context(), name, "a", ttl, start); err != nil {
		t.Fatal(err)
	}
	if le, err := b.Acquire(t.Context(), name, "b", ttl, start.Add(ttl-time.Second)); !errors.Is(err, stores.ErrLeaseHeld) {
		t.Fatalf("B's Acquire a second before A's lease ends = %+v, %v; want ErrLeaseHeld", le, err)
	}
}

// A box booted without a real-time clock (its clock 56 years behind) writes
// the tombstone of a delivered record. Its expiry ("ttl", which DynamoDB
// deletes by its own clock) is done_retention ahead in DynamoDB's clock, not
// in the box's: else DynamoDB would delete it at once and a redelivery of
// the message by the broker would be appended, and sent, again.
func TestWrite_TombstoneTTLInDynamoDBsClock(t *testing.T) {
	t.Parallel()
	const behind = 56 * 365 * 24 * time.Hour
	s, err := dynamodb.Open(t.Context(), dynamodb.Options{Table: sharedTable(t),
		Client: newClient(t, nil, func(o *awsddb.Options) { o.HTTPClient = &http.Client{Transport: lateDate{-behind}} })})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	session := uniqueName("tomb-")
	le, err := s.Acquire(t.Context(), stores.PartitionLease(session, 0), "a", time.Minute, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	rec := stores.Record{Session: session, Route: "r", Token: le.Token, Envelope: message.Envelope{ID: message.NewID()}}
	if err := s.Write(t.Context(), &stores.Batch{Append: []stores.Record{rec}}); err != nil {
		t.Fatal(err)
	}
	done := stores.Settlement{Key: rec.Key(), Token: le.Token, Outcome: stores.Done}
	if err := s.Write(t.Context(), &stores.Batch{Settle: []stores.Settlement{done}}); err != nil {
		t.Fatal(err)
	}
	pk, sk := dynamodb.KeyItem(rec.Key())
	out, err := newClient(t, nil).GetItem(t.Context(), &awsddb.GetItemInput{TableName: aws.String(sharedTable(t)), ConsistentRead: aws.Bool(true),
		Key: map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: pk}, "sk": &types.AttributeValueMemberS{Value: sk}}})
	if err != nil || out.Item == nil {
		t.Fatalf("tombstone: %v, %v", out, err)
	}
	n, _ := out.Item["ttl"].(*types.AttributeValueMemberN)
	ttl, _ := strconv.ParseInt(n.Value, 10, 64)
	if left := time.Until(time.Unix(ttl, 0).Add(-behind)); left < 6*24*time.Hour {
		t.Errorf("tombstone expires %v from now in DynamoDB's clock, want about 7 days", left)
	}
}
