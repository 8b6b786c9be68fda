package mqtt

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
	mochi "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/listeners"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/gobridge/gobridge/internal/testservices"
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
	port := freePort(t)
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

// aclBroker admits every client and refuses subscriptions under secret/.
type aclBroker struct{ mochi.HookBase }

func (aclBroker) ID() string { return "acl" }
func (aclBroker) Provides(b byte) bool {
	return b == mochi.OnConnectAuthenticate || b == mochi.OnACLCheck
}
func (aclBroker) OnConnectAuthenticate(*mochi.Client, packets.Packet) bool { return true }
func (aclBroker) OnACLCheck(_ *mochi.Client, topic string, _ bool) bool {
	return !strings.HasPrefix(topic, "secret/")
}

// startBroker runs an embedded mochi broker that grants at most maxQoS and
// refuses subscriptions under secret/; it returns its URL.
func startBroker(t *testing.T, maxQoS byte) string {
	t.Helper()
	caps := mochi.NewDefaultServerCapabilities()
	caps.MaximumQos = maxQoS
	srv := mochi.New(&mochi.Options{Capabilities: caps, Logger: testLogger(t)})
	if err := srv.AddHook(&aclBroker{}, nil); err != nil {
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
	return "tcp://" + ln.Addr().String()
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
	return runningReceiver{r: r, stop: testservices.Start(t, r.Run, nil)}
}

func waitSubscribed(t *testing.T, r *Receiver) {
	t.Helper()
	testsink.Eventually(t, "subscribed", func() bool { s := r.Status(); return s.Connected && s.Subscribed })
}

// freePort returns a port that was free a moment ago (see
// testservices.FreeAddr).
func freePort(t *testing.T) int {
	t.Helper()
	_, port, _ := net.SplitHostPort(testservices.FreeAddr(t))
	n, err := strconv.Atoi(port)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
