package dynamodb_test

import (
	"slices"
	"strconv"
	"testing"
	"time"

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

func ids(recs []stores.Record) []string {
	out := make([]string, len(recs))
	for i := range recs {
		out[i] = recs[i].Envelope.ID
	}
	return out
}
