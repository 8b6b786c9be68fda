package listener

import (
	"fmt"
	"sync"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
	mochi "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/gobridge/gobridge/receivers"
	"github.com/gobridge/gobridge/receivers/receivertest"
)

func TestListener_Conformance(t *testing.T) {
	t.Parallel()
	receivertest.Run(t, func(t *testing.T) receivertest.Harness { return &harness{rec: newWireRecorder()} })
}

// harness runs listeners on one address, with one paho publisher that
// keeps its session (and resends what was not acknowledged) across them.
type harness struct {
	rec  *wireRecorder
	addr string // fixed by the first listener
	pub  paho.Client
}

type running struct {
	*bundle
}

func (r running) Stats() receivers.Stats { return r.l.Stats() }
func (r running) Stop()                  { r.stop() }

func (h *harness) Start(t *testing.T, sink receivers.Sink, lim receivertest.Limits) receivertest.Running {
	listen := h.addr
	if listen == "" {
		listen = "127.0.0.1:0"
	}
	l, err := New(Options{ID: "edge", Listen: listen, Topics: []string{"conformance/#"},
		MaxPayloadBytes: lim.MaxPayloadBytes, MaxInflightBytes: lim.MaxInflightBytes}, sink, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	l.extraHooks = []mochi.Hook{h.rec}
	b := start(t, l, nil, nil)
	h.addr = l.Addr().String()
	return running{b}
}

func (h *harness) Publish(t *testing.T, payload []byte, qos byte) {
	if h.pub == nil {
		h.pub = paho.NewClient(paho.NewClientOptions().AddBroker("tcp://" + h.addr).SetClientID("conformance-publisher").
			SetCleanSession(false).SetAutoReconnect(true).SetMaxReconnectInterval(200 * time.Millisecond).
			SetConnectRetry(true).SetConnectRetryInterval(100 * time.Millisecond))
		waitToken(t, h.pub.Connect())
		t.Cleanup(func() { h.pub.Disconnect(0) })
	}
	h.pub.Publish("conformance/x", qos, false, payload)
}

func (h *harness) Acked() []string { return h.rec.acked() }

// wireRecorder is a mochi hook recording, in order, the payloads of the
// QoS 1 PUBLISHes whose PUBACK the broker wrote.
type wireRecorder struct {
	mochi.HookBase
	mu      sync.Mutex
	pending map[string]string // client/packet id -> payload
	acks    []string
}

func newWireRecorder() *wireRecorder { return &wireRecorder{pending: map[string]string{}} }

func (w *wireRecorder) ID() string { return "wire-recorder" }
func (w *wireRecorder) Provides(b byte) bool {
	return b == mochi.OnPacketRead || b == mochi.OnPacketSent
}

func (w *wireRecorder) OnPacketRead(cl *mochi.Client, pk packets.Packet) (packets.Packet, error) {
	if pk.FixedHeader.Type == packets.Publish && pk.FixedHeader.Qos == 1 {
		w.mu.Lock()
		w.pending[fmt.Sprint(cl.ID, pk.PacketID)] = string(pk.Payload)
		w.mu.Unlock()
	}
	return pk, nil
}

func (w *wireRecorder) OnPacketSent(cl *mochi.Client, pk packets.Packet, _ []byte) {
	if pk.FixedHeader.Type == packets.Puback {
		w.mu.Lock()
		w.acks = append(w.acks, w.pending[fmt.Sprint(cl.ID, pk.PacketID)])
		w.mu.Unlock()
	}
}

func (w *wireRecorder) acked() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.acks...)
}
