package dynamodb_test

import (
	"testing"
	"time"

	"github.com/gobridge/gobridge/message"
	"github.com/gobridge/gobridge/stores"
)

// TestStore_AppendDeadSplitsLargeCalls appends more dead letters than one
// transaction holds, some of them already present, to two routes: every
// new one is stored and counted once, the present ones are left as they are.
func TestStore_AppendDeadSplitsLargeCalls(t *testing.T) {
	s := newStore(t)
	session := uniqueName("sess-")
	routes := []string{uniqueName("route-a-"), uniqueName("route-b-")}
	t0 := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	recs := make([]stores.Record, 250)
	for i := range recs {
		recs[i] = stores.Record{Session: session, Route: routes[i%2], Envelope: message.Envelope{
			ID: message.NewID(), Topic: "t", Payload: []byte("x"), ReceivedAt: t0,
		}, CreatedAt: t0, DeadAt: t0.Add(time.Duration(i) * time.Millisecond), DeadReason: "processor"}
	}
	pending := recs[7] // already appended as a live record: stays live
	if err := s.Append(t.Context(), pending); err != nil {
		t.Fatal(err)
	}
	if err := s.AppendDead(t.Context(), recs[100:150]...); err != nil {
		t.Fatal(err)
	}
	if err := s.AppendDead(t.Context(), recs...); err != nil {
		t.Fatalf("AppendDead: %v", err)
	}
	in := s.(stores.Inspector)
	all, err := in.Inspect(t.Context(), t0)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]stores.RouteStats{}
	for _, st := range all {
		if st.Session == session {
			got[st.Route] = st
		}
	}
	if a, b := got[routes[0]], got[routes[1]]; a.Dead != 125 || b.Dead != 124 || b.Pending != 1 {
		t.Errorf("route a = %+v, route b = %+v; want 125 dead, and 124 dead plus 1 pending", a, b)
	}
	for _, route := range routes {
		n, after := 0, ""
		for {
			page, next, err := s.ListDead(t.Context(), stores.DeadFilter{Route: route, After: after, Limit: 100})
			if err != nil {
				t.Fatal(err)
			}
			n += len(page)
			if next == "" {
				break
			}
			after = next
		}
		if want := map[string]int{routes[0]: 125, routes[1]: 124}[route]; n != want {
			t.Errorf("ListDead(%s) = %d records, want %d", route, n, want)
		}
	}
	if st, err := s.Stats(t.Context(), session); err != nil || st.Pending != 1 {
		t.Errorf("Stats = %+v, %v; want 1 pending", st, err)
	}
}
