package listener

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/gobridge/gobridge/receivers"
	"github.com/gobridge/gobridge/receivers/internal/testsink"
)

// connect311 is an MQTT 3.1.1 CONNECT (clean session, keep-alive 60 s,
// no credentials) with the given client ID.
func connect311(clientID string) []byte {
	body := []byte{0, 4, 'M', 'Q', 'T', 'T', 4, 0x02, 0, 60}
	body = binary.BigEndian.AppendUint16(body, uint16(len(clientID)))
	body = append(body, clientID...)
	return append(append([]byte{0x10}, remainingLength(len(body))...), body...)
}

// TestListener_RefusesAnOversizedConnect: a first packet that announces
// more than MaxConnectBytes (here 300 KB, under the hard packet limit, sent
// a byte at a time after its header) closes the connection at once, not
// after connect_timeout: mochi would allocate the whole announced length
// for every such connection before any authentication. A CONNECT just
// under the limit is served.
func TestListener_RefusesAnOversizedConnect(t *testing.T) {
	t.Parallel()
	b := setup(t, testsink.New(true), func(o *Options) { o.ConnectTimeout = 5 * time.Minute })
	addr := strings.TrimPrefix(b.url, "tcp://")

	big, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer big.Close()
	for _, part := range [][]byte{{0x10}, remainingLength(300_000), {0, 4}} { // the header split across reads
		if _, err := big.Write(part); err != nil {
			t.Fatal(err)
		}
	}
	closedByServer(t, big) // within 10 s, long before connect_timeout

	ok, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer ok.Close()
	if _, err := ok.Write(connect311(strings.Repeat("c", MaxConnectBytes-20))); err != nil {
		t.Fatal(err)
	}
	connack := make([]byte, 4)
	_ = ok.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(ok, connack); err != nil || connack[0] != 0x20 || connack[3] != 0 {
		t.Fatalf("CONNACK for a CONNECT of %d bytes: %x, %v", MaxConnectBytes-8, connack, err)
	}
}

// TestListener_DisconnectsAClientThatStopsReading: a client with
// keep-alive 0 (mochi then sets no deadline at all) subscribes to what it
// publishes and never reads. Its connection's writes block, the PUBACKs of
// its messages wait behind them, and those messages held the whole
// max_inflight_bytes window: every other publisher was held back for
// good. A write that does not complete within writeTimeout closes the
// connection, which gives its room back.
func TestListener_DisconnectsAClientThatStopsReading(t *testing.T) {
	t.Parallel()
	const payload = 64 << 10
	sink := testsink.New(true)
	l, err := New(Options{ID: "edge", Listen: "127.0.0.1:0", Topics: []string{"factory/#"},
		MaxPayloadBytes: payload, MaxInflightBytes: 16 * payload,
		Users: []User{{Username: "hog", Password: "pw", ACL: ACL{Subscribe: []string{"factory/#"}}}, {Username: "press", Password: "pw"}},
	}, sink, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	l.writeTimeout = 200 * time.Millisecond
	l.wrapListener = func(ln net.Listener) net.Listener { return smallSendBuffers{ln} } // the kernel absorbs little
	b := start(t, l, sink, &ackRecorder{})

	hog, err := net.Dial("tcp", strings.TrimPrefix(b.url, "tcp://"))
	if err != nil {
		t.Fatal(err)
	}
	defer hog.Close()
	_ = hog.(*net.TCPConn).SetReadBuffer(4096)
	body := []byte{0, 4, 'M', 'Q', 'T', 'T', 4, 0xC2, 0, 0} // user and password, clean session, keep-alive 0
	for _, s := range []string{"hog", "hog", "pw"} {        // client ID, username, password
		body = binary.BigEndian.AppendUint16(body, uint16(len(s)))
		body = append(body, s...)
	}
	subscribe := []byte{0x82, 14, 0, 1, 0, 9, 'f', 'a', 'c', 't', 'o', 'r', 'y', '/', '#', 1}
	if _, err := hog.Write(append(append(append([]byte{0x10}, remainingLength(len(body))...), body...), subscribe...)); err != nil {
		t.Fatal(err)
	}
	gone := make(chan struct{})
	go func() {
		defer close(gone)
		for id := 1; ; id++ {
			if _, err := hog.Write(publishQoS1("factory/hog", uint16(id), make([]byte, payload-100))); err != nil {
				return // closed by the listener (or by the test's end)
			}
		}
	}()
	testsink.Eventually(t, "the hog fills the window or is disconnected", func() bool {
		select {
		case <-gone:
			return true
		default:
			return l.Stats().InFlightBytes > 15*payload
		}
	})
	press := publisher(t, b.url, func(o *paho.ClientOptions) { o.SetUsername("press").SetPassword("pw") })
	waitToken(t, press.Publish("factory/press/x", 1, false, make([]byte, payload-100))) // as large as the hog's: it needs their room
}

// smallSendBuffers accepts connections with a 4 KiB send buffer.
type smallSendBuffers struct{ net.Listener }

func (l smallSendBuffers) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetWriteBuffer(4096)
	}
	return c, err
}

// TestListener_OneAddressCannotHoldEveryConnection: one host opening
// max_clients silent connections (no CONNECT) kept every publisher out
// until connect_timeout, again and again. An address may hold at most
// receivers.PendingPerAddress connections that have not been admitted; admitted ones
// do not count, so one host may still connect many publishers.
func TestListener_OneAddressCannotHoldEveryConnection(t *testing.T) {
	t.Parallel()
	const maxClients = 80
	b := setup(t, testsink.New(true), func(o *Options) { o.MaxClients = maxClients; o.ConnectTimeout = time.Minute })
	addr := strings.TrimPrefix(b.url, "tcp://")
	attacker := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}}
	var silent []net.Conn
	for range maxClients {
		c, err := attacker.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		silent = append(silent, c)
	}
	closedByServer(t, silent[maxClients-1]) // over PendingPerAddress: refused
	for i := range maxClients - receivers.PendingPerAddress - 8 {
		publisher(t, b.url, func(o *paho.ClientOptions) { o.SetClientID(fmt.Sprintf("pub-%d", i)) })
	}
	// The attacker's first connections are still held: they count.
	_ = silent[0].SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	if _, err := silent[0].Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("the first silent connection was closed (%v): want it held until connect_timeout", err)
	}
}
