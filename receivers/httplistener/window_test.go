package httplistener

import (
	"strings"
	"testing"
	"time"

	"github.com/gobridge/gobridge/receivers"
	"github.com/gobridge/gobridge/receivers/internal/testsink"
)

// TestReceiver_BodyThatWaitedForRoomIsStillRead: a request waits for room
// in max_inflight_bytes up to settle_timeout (README). The server's read
// deadline runs from the request's start, so a body that waited longer
// than read_timeout failed to be read and the producer got 400 "read body:
// i/o timeout", a client error for a sound request (an HTTP client drops
// it), counted as malformed.
func TestReceiver_BodyThatWaitedForRoomIsStillRead(t *testing.T) {
	t.Parallel()
	sink := newSettlingSink(receivers.OutcomeCommitted, true)
	const limit = 64 << 10
	const readTimeout = 200 * time.Millisecond
	b := setup(t, Options{MaxPayloadBytes: limit, MaxBatchBytes: limit, MaxInflightBytes: limit,
		ReadTimeout: readTimeout, SettleTimeout: 10 * time.Second, WriteTimeout: 20 * time.Second}, sink)
	first := make(chan int, 1)
	go func() { // holds the whole window until released
		st, _, _ := post(t, b.url+"/plant/a", strings.NewReader(strings.Repeat("a", limit)), nil)
		first <- st
	}()
	<-sink.got
	type answer struct {
		status int
		body   map[string]any
	}
	second := make(chan answer, 1)
	go func() {
		st, body, _ := post(t, b.url+"/plant/b", strings.NewReader(strings.Repeat("b", limit/2)), nil)
		second <- answer{st, body}
	}()
	testsink.Eventually(t, "the second request is served (and waits for room)", func() bool { return len(b.r.slots) == 2 })
	time.Sleep(2 * readTimeout) // the condition under test: its wait outlasts read_timeout
	sink.release <- struct{}{}
	sink.release <- struct{}{}
	if st := <-first; st != 200 {
		t.Fatalf("first request: %d", st)
	}
	if a := <-second; a.status != 200 || a.body["outcome"] != receivers.OutcomeCommitted {
		t.Fatalf("the request that waited for room got %d %v", a.status, a.body)
	}
	if s := b.r.Stats(); s.Malformed != 0 {
		t.Fatalf("stats = %+v", s)
	}
}
