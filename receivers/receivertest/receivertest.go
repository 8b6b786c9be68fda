// Package receivertest is the conformance suite of the receivers: one set
// of cases every receiver passes against its real source (a broker for
// receivers/mqtt, real publishers for receivers/listener), over real
// sockets. A receiver's tests call Run with a Harness that starts it.
package receivertest

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gobridge/gobridge/receivers"
	"github.com/gobridge/gobridge/receivers/internal/testsink"
)

// Limits are the receiver options a case sets; zero means the default.
type Limits struct {
	MaxPayloadBytes  int
	MaxInflightBytes int
}

// Harness starts one receiver implementation against its source.
type Harness interface {
	// Start runs a receiver that hands messages to sink, and returns once
	// it is ready to receive. Every receiver a harness starts has the same
	// identity (client id, listen address), so one started after another
	// stopped gets what the first left unacknowledged.
	Start(t *testing.T, sink receivers.Sink, l Limits) Running
	// Publish sends a message towards the receiver, to a topic the receiver
	// hands to its sink, in the order of the calls; it does not wait for
	// any acknowledgement.
	Publish(t *testing.T, payload []byte, qos byte)
	// Acked returns the payloads of the QoS 1 messages the receiver
	// acknowledged on the wire, in the order of the acknowledgements.
	Acked() []string
}

// Running is a started receiver.
type Running interface {
	Stats() receivers.Stats
	// Stop cancels the receiver's Run and waits for it to return.
	Stop()
}

// Run runs every case, each with a harness of its own.
func Run(t *testing.T, newHarness func(t *testing.T) Harness) {
	for name, c := range map[string]func(*testing.T, Harness){
		"AcksInArrivalOrder":           acksInArrivalOrder,
		"RedeliversUnsettledAtStop":    redeliversUnsettledAtStop,
		"TruncatesOversizedPayloads":   truncatesOversizedPayloads,
		"BoundsInflightBytes":          boundsInflightBytes,
		"QoS0UnderPressureIsAccounted": qos0UnderPressureIsAccounted,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			c(t, newHarness(t))
		})
	}
}

// payload is message i of a case, padded to size bytes.
func payload(name string, i, size int) []byte {
	p := fmt.Sprintf("%s-%d.", name, i)
	return []byte(p + strings.Repeat("x", max(size-len(p), 0)))
}

// quiet waits a bounded while and fails if cond turns false meanwhile: the
// check that something does not happen.
func quiet(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(300 * time.Millisecond); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if !cond() {
			t.Fatalf("%s", what)
		}
	}
}

// A later message settled first is still acknowledged after the earlier
// ones (MQTT 3.1.1 §4.6).
func acksInArrivalOrder(t *testing.T, h Harness) {
	sink := testsink.New(false)
	h.Start(t, sink, Limits{})
	const n = 10
	var want []string
	for i := range n {
		p := payload("order", i, 0)
		want = append(want, string(p))
		h.Publish(t, p, 1)
	}
	var ds []testsink.Delivery
	for i := range n {
		d := sink.Next(t)
		if string(d.Msg.Payload) != want[i] {
			t.Fatalf("message %d arrived as %q", i, d.Msg.Payload)
		}
		ds = append(ds, d)
	}
	var wg sync.WaitGroup
	for i := n - 1; i >= 1; i-- { // all but the first, last first, from other goroutines
		wg.Go(ds[i].Done)
	}
	wg.Wait()
	quiet(t, "a message was acknowledged before the first one was settled", func() bool { return len(h.Acked()) == 0 })
	ds[0].Done()
	testsink.Eventually(t, "every message acknowledged", func() bool { return len(h.Acked()) == n })
	if got := h.Acked(); !slices.Equal(got, want) {
		t.Fatalf("acknowledged in the order %q, want %q", got, want)
	}
}

// A message not settled when the receiver stops is not acknowledged, and
// the next receiver gets it again.
func redeliversUnsettledAtStop(t *testing.T, h Harness) {
	first := testsink.New(false)
	r := h.Start(t, first, Limits{})
	h.Publish(t, []byte("held"), 1)
	first.Next(t) // never settled
	r.Stop()
	if s := r.Stats(); s.Acked != 0 || s.Abandoned != 1 || s.InFlight != 0 || s.InFlightBytes != 0 {
		t.Fatalf("stats after stop = %+v", s)
	}
	second := testsink.New(true)
	h.Start(t, second, Limits{})
	d := second.Next(t)
	if string(d.Msg.Payload) != "held" || !d.Msg.Duplicate {
		t.Fatalf("redelivered %+v", d.Msg)
	}
	testsink.Eventually(t, "the redelivery acknowledged", func() bool { return slices.Equal(h.Acked(), []string{"held"}) })
}

// A payload over MaxPayloadBytes reaches the sink truncated, with its size
// and hash, and is acknowledged once settled, in order.
func truncatesOversizedPayloads(t *testing.T, h Harness) {
	sink := testsink.New(true)
	r := h.Start(t, sink, Limits{MaxPayloadBytes: 4096})
	big, small := payload("big", 0, 10_000), payload("small", 1, 4096)
	h.Publish(t, big, 1)
	h.Publish(t, small, 1)
	sum := sha256.Sum256(big)
	d := sink.Next(t)
	m := d.Msg
	if !m.Truncated || m.Size != len(big) || m.SHA256 != hex.EncodeToString(sum[:]) ||
		string(m.Payload) != string(big[:receivers.TruncatedBytes]) {
		t.Fatalf("oversized message reached the sink as truncated=%v size=%d sha256=%s with %d payload bytes",
			m.Truncated, m.Size, m.SHA256, len(m.Payload))
	}
	if d := sink.Next(t); d.Msg.Truncated || d.Msg.Size != len(small) || string(d.Msg.Payload) != string(small) {
		t.Fatalf("a message of exactly MaxPayloadBytes reached the sink as %+v", d.Msg)
	}
	testsink.Eventually(t, "both acknowledged", func() bool { return len(h.Acked()) == 2 })
	if got := h.Acked(); got[0] != string(big) {
		t.Fatalf("acknowledged %q first", got[0][:10])
	}
	if s := r.Stats(); s.TooLarge != 1 || s.Received != 2 {
		t.Fatalf("stats = %+v", s)
	}
}

// The payload and topic bytes handed to the sink and not yet acknowledged
// never exceed MaxInflightBytes; QoS 1 messages beyond it wait, none is
// lost.
func boundsInflightBytes(t *testing.T, h Harness) {
	const size, window, n = 1024, 8 * 1024, 20
	sink := testsink.New(false)
	r := h.Start(t, sink, Limits{MaxPayloadBytes: size, MaxInflightBytes: window})
	for i := range n {
		h.Publish(t, payload("window", i, size), 1)
	}
	held := []testsink.Delivery{sink.Next(t)}
	weight := size + len(held[0].Msg.Topic) // what each message holds
	for range window/weight - 1 {
		held = append(held, sink.Next(t))
	}
	quiet(t, "more than MaxInflightBytes reached the sink", func() bool {
		s := r.Stats()
		return len(sink.C) == 0 && s.InFlightBytes <= window
	})
	if s := r.Stats(); s.InFlightBytes != int64(len(held)*weight) || s.Dropped != 0 {
		t.Fatalf("stats with a full window = %+v", s)
	}
	for _, d := range held {
		d.Done()
	}
	for i := len(held); i < n; i++ {
		d := sink.Next(t)
		if want := payload("window", i, size); string(d.Msg.Payload) != string(want) {
			t.Fatalf("message %d arrived as %.12q", i, d.Msg.Payload)
		}
		if s := r.Stats(); s.InFlightBytes > window {
			t.Fatalf("%d bytes in flight, bound %d", s.InFlightBytes, window)
		}
		d.Done()
	}
	testsink.Eventually(t, "all acknowledged", func() bool { return len(h.Acked()) == n })
}

// QoS 0 messages that arrive while the window is full are either delivered
// later or dropped and counted, never lost unaccounted; QoS 1 messages are
// never dropped.
func qos0UnderPressureIsAccounted(t *testing.T, h Harness) {
	const size, window, burst = 1024, 4 * 1024, 20
	sink := testsink.New(false)
	r := h.Start(t, sink, Limits{MaxPayloadBytes: size, MaxInflightBytes: window})
	for i := range window / size {
		h.Publish(t, payload("fill", i, size), 1)
	}
	held := []testsink.Delivery{sink.Next(t)}
	weight := size + len(held[0].Msg.Topic) // what each message holds
	for range window/weight - 1 {
		held = append(held, sink.Next(t))
	}
	for i := range burst {
		h.Publish(t, payload("qos0", i, size), 0)
	}
	h.Publish(t, payload("last", 0, size), 1)
	for _, d := range held {
		d.Done()
	}
	delivered := 0
	for {
		d := sink.Next(t)
		d.Done()
		if strings.HasPrefix(string(d.Msg.Payload), "last-") {
			break
		}
		if strings.HasPrefix(string(d.Msg.Payload), "qos0-") {
			delivered++ // (a fill message that did not fit comes too)
		}
	}
	if s := r.Stats(); uint64(delivered)+s.Dropped != burst {
		t.Fatalf("%d QoS 0 messages delivered and %d dropped, %d sent", delivered, s.Dropped, burst)
	}
	testsink.Eventually(t, "the QoS 1 messages acknowledged", func() bool { return len(h.Acked()) == window/size+1 })
	t.Logf("QoS 0 under pressure: %d delivered, %d dropped", delivered, r.Stats().Dropped)
}
