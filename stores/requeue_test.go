package stores_test

import (
	"errors"
	"testing"
	"time"

	"github.com/gobridge/gobridge/message"
	"github.com/gobridge/gobridge/stores"
	"github.com/gobridge/gobridge/stores/memory"
)

// An empty ID names no dead letter: as a query by ID it would be a list of
// them all, and requeue or drop would act on the oldest.
func TestRequeueAndDropDead_RefuseAnEmptyID(t *testing.T) {
	ctx := t.Context()
	s := memory.New(memory.Options{})
	b := &stores.Batch{Append: []stores.Record{{Session: "s", Route: "r", State: stores.Dead, DeadReason: "refused",
		Envelope: message.Envelope{ID: "d1", Topic: "t", Payload: []byte("x")}}}}
	if err := s.Write(ctx, b); err != nil {
		t.Fatal(err)
	}
	place := func(string) (string, int, error) { return "s", 1, nil }
	if _, err := stores.Requeue(ctx, s, "", "", "", place, time.Now()); !errors.Is(err, stores.ErrNotFound) {
		t.Errorf("requeue of an empty ID: %v, want ErrNotFound", err)
	}
	if err := stores.DropDead(ctx, s, "", ""); !errors.Is(err, stores.ErrNotFound) {
		t.Errorf("drop of an empty ID: %v, want ErrNotFound", err)
	}
	if dead, _, err := s.Dead(ctx, stores.DeadQuery{}); err != nil || len(dead) != 1 {
		t.Fatalf("dead letters after both: %d (%v), want the one untouched", len(dead), err)
	}
}
