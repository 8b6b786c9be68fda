package mqtt

import (
	"fmt"
	"net"
	"sync"
	"testing"

	mochi "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/listeners"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/gobridge/gobridge/receivers"
	"github.com/gobridge/gobridge/receivers/receivertest"
)

func TestReceiver_Conformance(t *testing.T) {
	t.Parallel()
	receivertest.Run(t, newHarness)
}

// harness is an embedded mochi broker that records, for the receiver's
// client id, the payloads of the PUBLISHes it sent and the PUBACKs it got
// back. Every receiver it starts uses that client id and a persistent
// session, so the broker resends what one left unacknowledged.
type harness struct {
	mochi.HookBase
	srv *mochi.Server
	url string

	mu      sync.Mutex
	pending map[uint16]string
	acks    []string
}

const harnessClient = "gobridge-conformance"

func newHarness(t *testing.T) receivertest.Harness {
	caps := mochi.NewDefaultServerCapabilities()
	caps.MaximumInflight = 65535
	h := &harness{srv: mochi.New(&mochi.Options{InlineClient: true, Capabilities: caps, Logger: testLogger(t)}), pending: map[uint16]string{}}
	if err := h.srv.AddHook(h, nil); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := h.srv.AddListener(listeners.NewNet("t", ln)); err != nil {
		t.Fatal(err)
	}
	if err := h.srv.Serve(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.srv.Close() })
	h.url = "tcp://" + ln.Addr().String()
	return h
}

func (h *harness) Start(t *testing.T, sink receivers.Sink, l receivertest.Limits) receivertest.Running {
	o := config(h.url, harnessClient, "conformance/#")
	o.MaxPayloadBytes, o.MaxInflightBytes = l.MaxPayloadBytes, l.MaxInflightBytes
	r, err := New(o, sink, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	rr := run(t, r)
	waitSubscribed(t, r)
	return rr
}

func (h *harness) Publish(t *testing.T, payload []byte, qos byte) {
	if err := h.srv.Publish("conformance/x", payload, false, qos); err != nil {
		t.Fatal(err)
	}
}

func (h *harness) Acked() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.acks...)
}

func (h *harness) ID() string { return "conformance-recorder" }
func (h *harness) Provides(b byte) bool {
	return b == mochi.OnPacketEncode || b == mochi.OnPacketRead || b == mochi.OnConnectAuthenticate || b == mochi.OnACLCheck
}
func (h *harness) OnConnectAuthenticate(*mochi.Client, packets.Packet) bool { return true }
func (h *harness) OnACLCheck(*mochi.Client, string, bool) bool              { return true }

// OnPacketEncode records a PUBLISH before it is written (OnPacketSent runs
// after the write, when the PUBACK may already be back).
func (h *harness) OnPacketEncode(cl *mochi.Client, pk packets.Packet) packets.Packet {
	if cl.ID == harnessClient && pk.FixedHeader.Type == packets.Publish && pk.FixedHeader.Qos == 1 {
		h.mu.Lock()
		h.pending[pk.PacketID] = string(pk.Payload)
		h.mu.Unlock()
	}
	return pk
}

func (h *harness) OnPacketRead(cl *mochi.Client, pk packets.Packet) (packets.Packet, error) {
	if cl.ID == harnessClient && pk.FixedHeader.Type == packets.Puback {
		h.mu.Lock()
		p, ok := h.pending[pk.PacketID]
		if !ok {
			p = fmt.Sprintf("unknown packet id %d", pk.PacketID)
		}
		h.acks = append(h.acks, p)
		h.mu.Unlock()
	}
	return pk, nil
}

// Stats and Stop make a runningReceiver a receivertest.Running.
func (rr runningReceiver) Stats() receivers.Stats { return rr.r.Stats() }
func (rr runningReceiver) Stop()                  { rr.stop() }
