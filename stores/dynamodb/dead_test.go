package dynamodb_test

import (
	"bytes"
	"io"
	"net/http"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	awsddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/gobridge/gobridge/message"
	"github.com/gobridge/gobridge/stores"
	"github.com/gobridge/gobridge/stores/dynamodb"
)

// Seqs are unique within a session only: dead letters of different
// sessions may share DeadAt and Seq (one batch, partition counters planned
// in the same microsecond). Paging must still return each of them once.
func TestDead_PagesLettersSharingDeadAtAndSeq(t *testing.T) {
	t.Parallel()
	s := open(t, nil)
	u := uniqueName("")
	r1, r2 := "route-a-"+u, "route-b-"+u
	deadAt := time.Date(2101, 1, 1, 0, 0, 0, 0, time.UTC)
	n := time.Now().UnixMicro() + 1e12 // the same counter in every session
	var recs []stores.Record
	for i, route := range []string{r1, r1, r2} {
		session := "sess-" + strconv.Itoa(i) + "-" + u
		dynamodb.SetCounter(s, session, 0, n)
		recs = append(recs, stores.Record{Session: session, Route: route, State: stores.Dead, DeadReason: "bad", DeadAt: deadAt,
			Envelope: message.Envelope{ID: message.NewID(), Topic: "t", Payload: []byte("p")}})
	}
	b := stores.Batch{Append: recs}
	if err := s.Write(t.Context(), &b); err != nil {
		t.Fatal(err)
	}
	if b.Append[0].Seq != b.Append[1].Seq || b.Append[0].Seq != b.Append[2].Seq {
		t.Fatalf("seqs %d, %d, %d: the test needs them equal", b.Append[0].Seq, b.Append[1].Seq, b.Append[2].Seq)
	}
	page := func(q stores.DeadQuery) []string {
		var got []string
		for range 10 {
			recs, next, err := s.Dead(t.Context(), q)
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, ids(recs)...)
			if next == "" {
				break
			}
			q.After = next
		}
		slices.Sort(got)
		return got
	}
	want := ids(recs[:2])
	slices.Sort(want)
	if got := page(stores.DeadQuery{Route: r1, Limit: 1}); !slices.Equal(got, want) {
		t.Errorf("route %s in pages of 1: %v, want %v", r1, got, want)
	}
	want = ids(recs)
	slices.Sort(want)
	// Every route, from just before deadAt (other tests' letters die earlier).
	after := strconv.FormatInt(deadAt.UnixNano()-1, 10) + ".0.0000000000000000"
	if got := page(stores.DeadQuery{After: after, Limit: 1}); !slices.Equal(got, want) {
		t.Errorf("every route in pages of 1: %v, want %v", got, want)
	}
}

// readCounter counts the response bytes of the requests it sends.
type readCounter struct{ n atomic.Int64 }

func (c *readCounter) RoundTrip(r *http.Request) (*http.Response, error) {
	res, err := http.DefaultTransport.RoundTrip(r)
	if err == nil {
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		c.n.Add(int64(len(b)))
		res.Body = io.NopCloser(bytes.NewReader(b))
	}
	return res, err
}

// A list without payloads does not transfer them: the query projects them
// out.
func TestDead_ListWithoutPayloadsReadsNone(t *testing.T) {
	t.Parallel()
	var c readCounter
	s := open(t, nil, func(o *awsddb.Options) { o.HTTPClient = &http.Client{Transport: &c} })
	route, size := uniqueName("route-"), 100_000
	recs := make([]stores.Record, 20)
	for i := range recs {
		recs[i] = stores.Record{Session: route, Route: route, State: stores.Dead, DeadReason: "bad", DeadAt: t0,
			Envelope: message.Envelope{ID: message.NewID(), Topic: "t", Payload: make([]byte, size)}}
	}
	if err := s.Write(t.Context(), &stores.Batch{Append: recs}); err != nil {
		t.Fatal(err)
	}
	before := c.n.Load()
	got, _, err := s.Dead(t.Context(), stores.DeadQuery{Route: route, NoPayload: true})
	read := c.n.Load() - before
	if err != nil || len(got) != len(recs) || got[0].PayloadBytes() != size {
		t.Fatalf("Dead: %v, %d letters of %d bytes", err, len(got), got[0].PayloadBytes())
	}
	t.Logf("listing %d letters of %d bytes without payloads read %d bytes", len(recs), size, read)
	if read > int64(size) {
		t.Errorf("listing %d letters of %d bytes without payloads read %d bytes", len(recs), size, read)
	}
}

func ids(recs []stores.Record) []string {
	out := make([]string, len(recs))
	for i := range recs {
		out[i] = recs[i].Envelope.ID
	}
	return out
}
