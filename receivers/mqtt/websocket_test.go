package mqtt

import (
	"fmt"
	"testing"

	"github.com/gobridge/gobridge/receivers/internal/testsink"
	"github.com/gobridge/gobridge/receivers/internal/testtls"
)

// TestReceiver_WebSockets subscribes over ws:// and wss:// (private CA) to a
// Mosquitto that also listens on plain TCP, where the messages are
// published.
func TestReceiver_WebSockets(t *testing.T) {
	t.Parallel()
	files := testtls.Write(t)
	wsPort, wssPort := freePort(t), freePort(t)
	m := startMosquitto(t,
		fmt.Sprintf("listener %d 127.0.0.1", wsPort), "protocol websockets",
		fmt.Sprintf("listener %d 127.0.0.1", wssPort), "protocol websockets",
		"cafile "+files.CAFile, "certfile "+files.CertFile, "keyfile "+files.KeyFile)

	for _, tc := range []struct {
		name, url string
		gated     bool // dialled by the receiver's own dial (MayConnect), not paho's
	}{
		{"ws", fmt.Sprintf("ws://127.0.0.1:%d/mqtt", wsPort), false},
		{"wss", fmt.Sprintf("wss://127.0.0.1:%d/mqtt", wssPort), false},
		{"ws gated", fmt.Sprintf("ws://127.0.0.1:%d/mqtt", wsPort), true},
		{"wss gated", fmt.Sprintf("wss://127.0.0.1:%d/mqtt", wssPort), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := unique(t)
			cfg := config(tc.url, id, "ws/"+id+"/#")
			cfg.TLS = files.Client(t, false)
			if tc.gated {
				cfg.MayConnect = func() error { return nil }
			}
			sink := testsink.New(true)
			r := newReceiver(t, cfg, sink)
			run(t, r)
			waitSubscribed(t, r)
			publish(t, "tcp://"+m.addr(), "ws/"+id+"/a", "over "+tc.name)
			if d := sink.Next(t); string(d.Msg.Payload) != "over "+tc.name || d.Msg.QoS != 1 {
				t.Fatalf("got %+v", d.Msg)
			}
			testsink.Eventually(t, "the ack", func() bool { return r.Stats().Acked == 1 })
		})
	}
}
