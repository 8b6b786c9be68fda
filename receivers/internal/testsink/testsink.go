// Package testsink is a receivers.Sink for tests: it records every message
// with its done callback, and settles at once or leaves settling to the
// test.
package testsink

import (
	"context"
	"testing"
	"time"

	"github.com/gobridge/gobridge/receivers"
)

// Func adapts a function to a receivers.Sink.
type Func func(ctx context.Context, m receivers.Message, done func())

// Accept calls f.
func (f Func) Accept(ctx context.Context, m receivers.Message, done func()) { f(ctx, m, done) }

// Delivery is one message handed to the sink, with its done callback.
type Delivery struct {
	Msg  receivers.Message
	Done func()
}

// Sink records deliveries on C (buffered for 100,000). When AutoSettle is
// true it calls done before recording.
type Sink struct {
	C          chan Delivery
	AutoSettle bool
}

// New returns a sink; autoSettle says whether it settles every message at once.
func New(autoSettle bool) *Sink {
	return &Sink{C: make(chan Delivery, 100_000), AutoSettle: autoSettle}
}

// Accept implements receivers.Sink.
func (s *Sink) Accept(ctx context.Context, m receivers.Message, done func()) {
	if s.AutoSettle {
		done()
	}
	select {
	case s.C <- Delivery{Msg: m, Done: done}:
	case <-ctx.Done():
	}
}

// Next waits up to 10s for the next delivery.
func (s *Sink) Next(t testing.TB) Delivery {
	t.Helper()
	select {
	case d := <-s.C:
		return d
	case <-time.After(10 * time.Second):
		t.Fatal("no message reached the sink within 10s")
		return Delivery{}
	}
}

// Eventually polls cond every 10ms until it holds, failing the test after
// 15s with what.
func Eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(10 * time.Millisecond) // polling with a deadline, not synchronisation by sleep
	}
}

var _ receivers.Sink = (*Sink)(nil)
