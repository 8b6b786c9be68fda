package dynamodb_test

import (
	"sync"
	"testing"
	"time"

	"github.com/gobridge/gobridge/message"
	"github.com/gobridge/gobridge/stores"
)

// TestStore_ConcurrentCoalescedAppendsLeaveOneRecord appends 100 records of
// one coalesce key from 4 goroutines at once: appends that raced with no
// holder to condition on leave extra pending records, which later appends
// settle, so one record remains.
func TestStore_ConcurrentCoalescedAppendsLeaveOneRecord(t *testing.T) {
	s := newStore(t)
	sess := "coalesce-" + message.NewID()
	var wg sync.WaitGroup
	base := time.Now()
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := range 25 {
				id := message.NewID()
				r := stores.Record{Session: sess, Route: "r", CoalesceKey: "k",
					Envelope: message.Envelope{ID: id, Topic: "t", Payload: []byte("x"), ReceivedAt: base.Add(time.Duration(n*4+g) * time.Millisecond)}}
				if err := s.Append(t.Context(), r); err != nil {
					t.Errorf("append: %v", err)
				}
			}
		}()
	}
	wg.Wait()
	st, err := s.Stats(t.Context(), sess)
	if err != nil {
		t.Fatalf("Stats: %v", err)
	}
	if st.Pending != 1 {
		t.Errorf("Stats.Pending = %d, want 1: one record per coalesce key", st.Pending)
	}
}
