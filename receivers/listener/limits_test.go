package listener

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/gobridge/gobridge/receivers/internal/testsink"
)

// remainingLength encodes n as an MQTT variable byte integer.
func remainingLength(n int) []byte {
	var b []byte
	for {
		d := byte(n % 128)
		n /= 128
		if n > 0 {
			d |= 0x80
		}
		b = append(b, d)
		if n == 0 {
			return b
		}
	}
}

// connectPacket is an MQTT 3.1.1 CONNECT with a clean session.
func connectPacket(clientID string) []byte {
	body := []byte{0, 4, 'M', 'Q', 'T', 'T', 4, 0x02, 0, 60}
	body = binary.BigEndian.AppendUint16(body, uint16(len(clientID)))
	body = append(body, clientID...)
	return append(append([]byte{0x10}, remainingLength(len(body))...), body...)
}

// closedByServer reads from conn until the server closes it; it fails the
// test when the server keeps it open for 10s.
func closedByServer(t *testing.T, conn net.Conn) {
	t.Helper()
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err := io.Copy(io.Discard, conn)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatal("the listener kept the connection open")
	}
}

// TestListener_HugePacketCostsNoMemory announces 200 MiB packets (a CONNECT
// as the first packet, and a PUBLISH after a valid CONNECT) in 5 bytes of
// fixed header: the listener must close the connection without allocating
// the body. Not parallel: it measures the process's allocations.
func TestListener_HugePacketCostsNoMemory(t *testing.T) {
	b := setup(t, testsink.New(true), nil)
	addr := strings.TrimPrefix(b.url, "tcp://")
	const announced = 200 << 20
	for name, prefix := range map[string][]byte{
		"first packet":         nil,
		"after a good CONNECT": connectPacket("huge"),
	} {
		t.Run(name, func(t *testing.T) {
			conn, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			header := byte(0x10) // CONNECT
			if prefix != nil {
				header = 0x32 // PUBLISH, QoS 1
			}
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			if _, err := conn.Write(append(append(prefix, header), remainingLength(announced)...)); err != nil {
				t.Fatal(err)
			}
			closedByServer(t, conn)
			runtime.ReadMemStats(&after)
			if grew := after.TotalAlloc - before.TotalAlloc; grew > 16<<20 {
				t.Fatalf("a %d MiB packet header made the process allocate %d MiB", announced>>20, grew>>20)
			}
		})
	}
	if s := b.l.Stats(); s.Received != 0 {
		t.Fatalf("stats = %+v", s)
	}
}

func TestListener_RefusesClientsOverMaxClients(t *testing.T) {
	t.Parallel()
	b := setup(t, testsink.New(true), func(o *Options) { o.MaxClients = 3 })
	first := publisher(t, b.url, nil)
	publisher(t, b.url, nil)
	// A connection counts before its CONNECT too.
	silent, err := net.Dial("tcp", strings.TrimPrefix(b.url, "tcp://"))
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	if !refused(t, b.url, nil) {
		t.Fatal("a fourth client connected with max_clients 3")
	}
	first.Disconnect(0)
	testsink.Eventually(t, "a client connects once another left", func() bool { return !refused(t, b.url, nil) })
}

func TestListener_DropsConnectionsThatNeverSendCONNECT(t *testing.T) {
	t.Parallel()
	b := setup(t, testsink.New(true), func(o *Options) { o.ConnectTimeout = 200 * time.Millisecond })
	conn, err := net.Dial("tcp", strings.TrimPrefix(b.url, "tcp://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	closedByServer(t, conn)
	// A client that does send its CONNECT keeps its connection past the
	// timeout: the keep-alive deadline replaces it.
	c := publisher(t, b.url, nil)
	for deadline := time.Now().Add(600 * time.Millisecond); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if !c.IsConnectionOpen() {
			t.Fatal("a connected client was dropped at the connect timeout")
		}
	}
	waitToken(t, c.Publish("factory/1/x", 1, false, "a"))
	b.sink.Next(t)
}

// flakyListener fails its first failures Accepts with EMFILE, as a process
// out of file descriptors does.
type flakyListener struct {
	net.Listener
	failures atomic.Int32
}

func (l *flakyListener) Accept() (net.Conn, error) {
	if l.failures.Add(-1) >= 0 {
		return nil, &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", syscall.EMFILE)}
	}
	return l.Listener.Accept()
}

func TestListener_AcceptErrorsDoNotStopIt(t *testing.T) {
	t.Parallel()
	sink := testsink.New(true)
	l, err := New(Options{ID: "edge", Listen: "127.0.0.1:0", Topics: []string{"factory/#"}}, sink, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	l.wrapListener = func(ln net.Listener) net.Listener {
		fl := &flakyListener{Listener: ln}
		fl.failures.Store(5)
		return fl
	}
	b := start(t, l, sink, nil)
	pub := publisher(t, b.url, nil)
	waitToken(t, pub.Publish("factory/1/x", 1, false, "after EMFILE"))
	if d := sink.Next(t); string(d.Msg.Payload) != "after EMFILE" {
		t.Fatalf("got %q", d.Msg.Payload)
	}
	if !l.Status().Connected {
		t.Fatalf("status = %+v", l.Status())
	}
}

func TestListener_DoesNotKeepRetainedMessages(t *testing.T) {
	t.Parallel()
	for _, retain := range []bool{false, true} {
		t.Run(fmt.Sprintf("retain=%v", retain), func(t *testing.T) {
			t.Parallel()
			b := setup(t, testsink.New(true), func(o *Options) {
				o.Retain = retain
				o.Anonymous.Subscribe = []string{"factory/#"}
			})
			pub := publisher(t, b.url, nil)
			waitToken(t, pub.Publish("factory/1/state", 1, true, "retained?"))
			if d := b.sink.Next(t); d.Msg.Retained != retain {
				t.Fatalf("the sink got retained=%v", d.Msg.Retained)
			}
			// The publisher's messages are acknowledged, then stored and
			// routed, one after the other: once a second message is
			// acknowledged, the first is stored (if kept) and routed, so it
			// cannot reach the subscriber below as a live message.
			waitToken(t, pub.Publish("sync", 1, false, "after"))
			type delivery struct {
				payload  string
				retained bool
			}
			got := make(chan delivery, 10)
			sub := publisher(t, b.url, func(o *paho.ClientOptions) {
				o.SetDefaultPublishHandler(func(_ paho.Client, m paho.Message) { got <- delivery{string(m.Payload()), m.Retained()} })
			})
			waitToken(t, sub.Subscribe("factory/#", 1, nil))
			// Kept, the retained message reaches the new subscriber as
			// retained; not kept, nothing retained does, and the message
			// published after it subscribed does.
			if !retain {
				waitToken(t, pub.Publish("factory/2/state", 1, false, "later"))
			}
			want := map[bool]delivery{false: {"later", false}, true: {"retained?", true}}[retain]
			select {
			case d := <-got:
				if d != want {
					t.Fatalf("the subscriber got %+v, want %+v", d, want)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("the subscriber got nothing, want %+v", want)
			}
			if _, kept := b.l.srv.Topics.Retained.Get("factory/1/state"); kept != retain {
				t.Fatalf("the broker keeps the retained message: %v, want %v", kept, retain)
			}
		})
	}
}

// TestListener_BoundsWhatIsQueuedPerSubscriber subscribes a client that
// never acknowledges: the broker queues at most MaxInflightBytes /
// MaxPayloadBytes messages for it, and publishers are not held back.
func TestListener_BoundsWhatIsQueuedPerSubscriber(t *testing.T) {
	t.Parallel()
	b := setup(t, testsink.New(true), func(o *Options) {
		o.MaxPayloadBytes, o.MaxInflightBytes = 1024, 16*1024
		o.Anonymous.Subscribe = []string{"factory/#"}
	})
	var got atomic.Int32
	sub := publisher(t, b.url, func(o *paho.ClientOptions) {
		o.SetAutoAckDisabled(true). // never acknowledges
						SetDefaultPublishHandler(func(paho.Client, paho.Message) { got.Add(1) })
	})
	waitToken(t, sub.Subscribe("factory/#", 1, nil))
	pub := publisher(t, b.url, nil)
	for i := range 40 {
		waitToken(t, pub.Publish("factory/1/x", 1, false, fmt.Sprint(i)))
	}
	testsink.Eventually(t, "16 messages at the subscriber", func() bool { return got.Load() >= 16 })
	for deadline := time.Now().Add(300 * time.Millisecond); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if n := got.Load(); n > 16 {
			t.Fatalf("%d unacknowledged messages reached the subscriber, bound 16", n)
		}
	}
}

// TestListener_LongTopicsCountAgainstMaxInflightBytes publishes QoS 1
// messages with 16 KiB topics and 1-byte payloads to a sink that holds
// them: every message held costs its topic as well, so max_inflight_bytes
// (64 KiB) must count the topic, or a publisher holds 1024 x 64 KiB per
// connection with the window showing a few bytes.
func TestListener_LongTopicsCountAgainstMaxInflightBytes(t *testing.T) {
	t.Parallel()
	b := setup(t, testsink.New(false), func(o *Options) { o.MaxInflightBytes = 64 << 10; o.MaxPayloadBytes = 1024 })
	pub := publisher(t, b.url, nil)
	topic := "factory/" + strings.Repeat("t", 16<<10)
	const n = 8
	toks := make([]paho.Token, n)
	for i := range toks {
		toks[i] = pub.Publish(topic, 1, false, "x")
	}
	held := make([]testsink.Delivery, 0, n)
	for range 3 { // 3 x (16 KiB + 9 bytes) fit in 64 KiB; a 4th does not
		held = append(held, b.sink.Next(t))
	}
	if s := b.l.Stats(); s.InFlightBytes < int64(3*(len(topic)+1)) {
		t.Fatalf("3 messages of %d topic bytes held, in-flight bytes %d (stats %+v)", len(topic), s.InFlightBytes, s)
	}
	// Nothing is lost: settling lets the rest in.
	for len(held) < n {
		held[len(held)-3].Done()
		held = append(held, b.sink.Next(t))
	}
	for _, d := range held[n-3:] {
		d.Done()
	}
	for _, tok := range toks {
		waitToken(t, tok)
	}
	// The acker counts an acknowledgement just after writing its PUBACK.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		s := b.l.Stats()
		if s.Acked == n && s.InFlightBytes == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("stats = %+v, want %d acked and no bytes in flight", s, n)
		}
	}
}

// publish5 is an MQTT 5 QoS 0 PUBLISH carrying a topic alias.
func publish5(topic string, alias uint16, payload string) []byte {
	body := binary.BigEndian.AppendUint16(nil, uint16(len(topic)))
	body = append(body, topic...)
	body = append(body, 3, 0x23) // properties: 3 bytes, Topic Alias
	body = binary.BigEndian.AppendUint16(body, alias)
	body = append(body, payload...)
	return append(append([]byte{0x30}, remainingLength(len(body))...), body...)
}

// TestListener_RefusesTopicAliases: mochi keeps every inbound topic alias
// (up to 65535 a connection, each topic up to 64 KiB: 4 GiB that no limit
// counts, denied publications included) although its CONNACK announces
// none, which tells clients not to send any. A PUBLISH with an alias is a
// protocol error: the connection is closed and nothing reaches the sink.
func TestListener_RefusesTopicAliases(t *testing.T) {
	t.Parallel()
	b := setup(t, testsink.New(true), nil)
	conn, err := net.Dial("tcp", strings.TrimPrefix(b.url, "tcp://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	clientID := "alias-" + t.Name()
	body := []byte{0, 4, 'M', 'Q', 'T', 'T', 5, 0x02, 0, 60, 0} // MQTT 5, clean start, no properties
	body = binary.BigEndian.AppendUint16(body, uint16(len(clientID)))
	body = append(body, clientID...)
	connect := append(append([]byte{0x10}, remainingLength(len(body))...), body...)
	if _, err := conn.Write(connect); err != nil {
		t.Fatal(err)
	}
	connack := make([]byte, 2)
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(conn, connack); err != nil || connack[0] != 0x20 {
		t.Fatalf("CONNACK: %x, %v", connack, err)
	}
	rest := make([]byte, connack[1])
	if _, err := io.ReadFull(conn, rest); err != nil || rest[1] != 0 {
		t.Fatalf("CONNACK refused: %x, %v", rest, err)
	}
	if _, err := conn.Write(append(publish5("factory/alias", 1, "set"), publish5("", 1, "via alias")...)); err != nil {
		t.Fatal(err)
	}
	closedByServer(t, conn)
	if s := b.l.Stats(); s.Received != 0 {
		t.Fatalf("a message with a topic alias reached the sink: %+v", s)
	}
}
