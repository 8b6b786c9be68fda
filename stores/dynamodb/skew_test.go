package dynamodb_test

import (
	"errors"
	"net/http"
	"testing"
	"time"

	awsddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"

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
