package mqtt

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
	mochi "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/listeners"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/gobridge/gobridge/receivers/internal/testsink"
)

// privateMosquitto is a mosquitto this test starts on its own port, so that
// it can stop and restart it.
type privateMosquitto struct {
	t    *testing.T
	conf string
	port int
	cmd  *exec.Cmd
	exit chan struct{}
}

// startMosquitto runs `mosquitto -c conf` on a free port; extra lines go
// into the listener section. It skips when mosquitto is not installed.
func startMosquitto(t *testing.T, extra ...string) *privateMosquitto {
	t.Helper()
	if _, err := exec.LookPath("mosquitto"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("mosquitto is not installed: %v", err)
		}
		t.Skipf("mosquitto is not installed (bash scripts/test-services.sh installs it): %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	dir := t.TempDir()
	conf := filepath.Join(dir, "mosquitto.conf")
	body := fmt.Sprintf("user root\nper_listener_settings false\nallow_anonymous true\n"+
		"persistence true\npersistence_location %s/\nautosave_interval 0\n"+
		"max_queued_messages 100000\nlog_dest stderr\nlistener %d 127.0.0.1\n", dir, port)
	for _, l := range extra {
		body += l + "\n"
	}
	if err := os.WriteFile(conf, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	m := &privateMosquitto{t: t, conf: conf, port: port}
	m.start()
	t.Cleanup(m.stop)
	return m
}

func (m *privateMosquitto) start() {
	m.t.Helper()
	m.cmd = exec.Command("mosquitto", "-c", m.conf)
	m.cmd.Stderr = m.t.Output()
	if err := m.cmd.Start(); err != nil {
		m.t.Fatal(err)
	}
	m.exit = make(chan struct{})
	go func() { m.cmd.Wait(); close(m.exit) }()
	testsink.Eventually(m.t, "mosquitto listens", func() bool {
		select {
		case <-m.exit:
			// It could not bind (the probed port was taken meanwhile): do
			// not mistake another process on that port for the broker.
			m.cmd = nil
			m.t.Fatalf("mosquitto on %s exited during startup (see its log above)", m.addr())
		default:
		}
		c, err := net.Dial("tcp", m.addr())
		if err != nil {
			return false
		}
		c.Close()
		return true
	})
}

// stop kills the broker (it started it: by its own process) and waits;
// the broker loses what it had not saved.
func (m *privateMosquitto) stop() {
	if m.cmd == nil {
		return
	}
	m.cmd.Process.Kill()
	<-m.exit
	m.cmd = nil
}

// shutdown stops the broker gracefully (SIGTERM): it saves its sessions
// and queued messages, and a restart restores them.
func (m *privateMosquitto) shutdown() {
	m.cmd.Process.Signal(syscall.SIGTERM)
	<-m.exit
	m.cmd = nil
}

func (m *privateMosquitto) addr() string { return fmt.Sprintf("127.0.0.1:%d", m.port) }

// orderBroker is an embedded mochi broker recording, for one subscriber,
// the packet ids of the PUBLISHes it sent and of the PUBACKs it got back.
type orderBroker struct {
	mochi.HookBase
	srv    *mochi.Server
	url    string
	client string

	mu        sync.Mutex
	published []uint16
	acked     []uint16
}

func (h *orderBroker) ID() string { return "order-recorder" }
func (h *orderBroker) Provides(b byte) bool {
	return b == mochi.OnPacketSent || b == mochi.OnPacketRead || b == mochi.OnConnectAuthenticate || b == mochi.OnACLCheck
}

func (h *orderBroker) OnConnectAuthenticate(*mochi.Client, packets.Packet) bool { return true }

// OnACLCheck refuses every filter under secret/.
func (h *orderBroker) OnACLCheck(_ *mochi.Client, topic string, _ bool) bool {
	return !strings.HasPrefix(topic, "secret/")
}

func (h *orderBroker) OnPacketSent(cl *mochi.Client, pk packets.Packet, _ []byte) {
	if cl.ID == h.client && pk.FixedHeader.Type == packets.Publish {
		h.mu.Lock()
		h.published = append(h.published, pk.PacketID)
		h.mu.Unlock()
	}
}

func (h *orderBroker) OnPacketRead(cl *mochi.Client, pk packets.Packet) (packets.Packet, error) {
	if cl.ID == h.client && pk.FixedHeader.Type == packets.Puback {
		h.mu.Lock()
		h.acked = append(h.acked, pk.PacketID)
		h.mu.Unlock()
	}
	return pk, nil
}

func (h *orderBroker) snapshot() (published, acked []uint16) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]uint16(nil), h.published...), append([]uint16(nil), h.acked...)
}

func startOrderBroker(t *testing.T, client string) *orderBroker {
	t.Helper()
	caps := mochi.NewDefaultServerCapabilities()
	caps.MaximumInflight = 65535
	srv := mochi.New(&mochi.Options{InlineClient: true, Capabilities: caps, Logger: testLogger(t)})
	h := &orderBroker{srv: srv, client: client}
	if err := srv.AddHook(h, nil); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.AddListener(listeners.NewNet("t", ln)); err != nil {
		t.Fatal(err)
	}
	if err := srv.Serve(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	h.url = "tcp://" + ln.Addr().String()
	return h
}

// publish sends QoS 1 messages through a fresh paho client and waits for
// every PUBACK.
func publish(t *testing.T, url, topic string, payloads ...string) {
	t.Helper()
	c := paho.NewClient(paho.NewClientOptions().AddBroker(url).
		SetClientID(fmt.Sprintf("pub-%d", time.Now().UnixNano())).SetAutoReconnect(false))
	if tok := c.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("publisher connect: %v", tok.Error())
	}
	defer c.Disconnect(100)
	toks := make([]paho.Token, len(payloads))
	for i, p := range payloads {
		toks[i] = c.Publish(topic, 1, false, p)
	}
	for _, tok := range toks {
		if !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
			t.Fatalf("publish: %v", tok.Error())
		}
	}
}

// runningReceiver runs r until stop is called (or the test ends).
type runningReceiver struct {
	r    *Receiver
	stop func()
}

func run(t *testing.T, r *Receiver) runningReceiver {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- r.Run(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-errc:
				if err != nil {
					t.Errorf("Run returned %v", err)
				}
			case <-time.After(30 * time.Second):
				t.Error("Run did not return within 30s of cancel")
			}
		})
	}
	t.Cleanup(stop)
	return runningReceiver{r: r, stop: stop}
}

func waitSubscribed(t *testing.T, r *Receiver) {
	t.Helper()
	testsink.Eventually(t, "subscribed", func() bool { s := r.Status(); return s.Connected && s.Subscribed })
}
