package listener

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gobridge/gobridge/internal/testservices"

	paho "github.com/eclipse/paho.mqtt.golang"
	mochi "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/gobridge/gobridge/receivers/internal/testsink"
	"github.com/gobridge/gobridge/receivers/internal/testtls"
)

// ackRecorder is a mochi hook recording the packet ids of the PUBACKs the
// broker writes, in order.
type ackRecorder struct {
	mochi.HookBase
	mu   sync.Mutex
	acks []uint16
}

func (h *ackRecorder) ID() string           { return "ack-recorder" }
func (h *ackRecorder) Provides(b byte) bool { return b == mochi.OnPacketSent }
func (h *ackRecorder) OnPacketSent(_ *mochi.Client, pk packets.Packet, _ []byte) {
	if pk.FixedHeader.Type == packets.Puback {
		h.mu.Lock()
		h.acks = append(h.acks, pk.PacketID)
		h.mu.Unlock()
	}
}

func (h *ackRecorder) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.acks)
}

// waitFor waits until n PUBACKs were recorded: mochi runs OnPacketSent
// after the write, so a publisher may hold its PUBACK before the hook ran.
func (h *ackRecorder) waitFor(t *testing.T, n int) {
	t.Helper()
	testsink.Eventually(t, fmt.Sprintf("%d PUBACKs recorded", n), func() bool { return h.count() >= n })
}

type bundle struct {
	l    *Listener
	sink *testsink.Sink
	acks *ackRecorder
	url  string // tcp:// or ssl:// URL of the listener
	stop func() // cancels Run and waits for it to return nil
}

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// setup runs a listener on 127.0.0.1:0 for topics factory/#, open to
// anonymous clients (loopback, no users) unless mutate says otherwise.
func setup(t *testing.T, sink *testsink.Sink, mutate func(*Options)) *bundle {
	t.Helper()
	o := Options{ID: "edge", Listen: "127.0.0.1:0", Topics: []string{"factory/#"}}
	if mutate != nil {
		mutate(&o)
	}
	l, err := New(o, sink, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	acks := &ackRecorder{}
	l.extraHooks = append(l.extraHooks, acks)
	return start(t, l, sink, acks)
}

func start(t *testing.T, l *Listener, sink *testsink.Sink, acks *ackRecorder) *bundle {
	t.Helper()
	stop := testservices.Start(t, l.Run, l.Ready())
	scheme := "tcp"
	if l.o.TLS != nil {
		scheme = "ssl"
	}
	host, port, _ := net.SplitHostPort(l.Addr().String())
	if net.ParseIP(host).IsUnspecified() { // listening on every interface
		host = "127.0.0.1"
	}
	return &bundle{l: l, sink: sink, acks: acks, url: scheme + "://" + net.JoinHostPort(host, port), stop: stop}
}

func publisher(t *testing.T, url string, configure func(*paho.ClientOptions)) paho.Client {
	t.Helper()
	opts := paho.NewClientOptions().AddBroker(url).SetClientID(fmt.Sprintf("pub-%s-%d", t.Name(), time.Now().UnixNano())).
		SetAutoReconnect(false).SetConnectTimeout(5 * time.Second).SetMaxResumePubInFlight(0)
	if configure != nil {
		configure(opts)
	}
	c := paho.NewClient(opts)
	tok := c.Connect()
	if !tok.WaitTimeout(10 * time.Second) {
		t.Fatal("connect timed out")
	}
	if err := tok.Error(); err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { c.Disconnect(0) })
	return c
}

func waitToken(t *testing.T, tok paho.Token) {
	t.Helper()
	if !tok.WaitTimeout(10 * time.Second) {
		t.Fatal("token did not complete within 10s")
	}
	if err := tok.Error(); err != nil {
		t.Fatal(err)
	}
}

func (h *ackRecorder) snapshot() []uint16 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.acks)
}

func TestListener_PubackOnlyAfterDone(t *testing.T) {
	t.Parallel()
	b := setup(t, testsink.New(false), nil)
	pub := publisher(t, b.url, nil)

	tok1 := pub.Publish("factory/1/telemetry", 1, false, "one")
	tok2 := pub.Publish("factory/1/telemetry", 1, false, "two")
	d1, d2 := b.sink.Next(t), b.sink.Next(t)
	if string(d1.Msg.Payload) != "one" || d1.Msg.QoS != 1 || d1.Msg.Receiver != "edge" || string(d2.Msg.Payload) != "two" {
		t.Fatalf("got %+v then %+v", d1.Msg, d2.Msg)
	}
	// The second message is settled first: it must wait for the first.
	// (A bounded wait for something that must not happen.)
	d2.Done()
	if tok2.WaitTimeout(300 * time.Millisecond) {
		t.Fatal("publisher got the second PUBACK before the first message was settled")
	}
	if tok1.WaitTimeout(0) {
		t.Fatal("publisher got a PUBACK before the message was settled")
	}
	if acks := b.acks.snapshot(); len(acks) != 0 {
		t.Fatalf("broker wrote PUBACKs %v before the first message was settled", acks)
	}

	d1.Done()
	waitToken(t, tok1)
	waitToken(t, tok2)
	b.acks.waitFor(t, 2)
	if acks := b.acks.snapshot(); !slices.Equal(acks, []uint16{1, 2}) {
		t.Fatalf("PUBACKs %v, want [1 2]", acks)
	}
	// The acker counts an acknowledgement (after releasing its room) just
	// after writing its PUBACK: the publisher can hold it first.
	testsink.Eventually(t, "2 acknowledgements counted", func() bool { return b.l.Stats().Acked >= 2 })
	if s := b.l.Stats(); s.Received != 2 || s.Acked != 2 || s.InFlight != 0 {
		t.Fatalf("stats = %+v", s)
	}
}

func TestListener_QoS2PubrecOnlyAfterDone(t *testing.T) {
	t.Parallel()
	b := setup(t, testsink.New(false), nil)
	pub := publisher(t, b.url, nil)
	tok := pub.Publish("factory/1/telemetry", 2, false, "exactly")
	d := b.sink.Next(t)
	if d.Msg.QoS != 2 {
		t.Fatalf("qos = %d", d.Msg.QoS)
	}
	if tok.WaitTimeout(300 * time.Millisecond) {
		t.Fatal("QoS 2 flow completed before done")
	}
	d.Done()
	waitToken(t, tok)
	// The acker counts an acknowledgement just after writing its PUBREC.
	testsink.Eventually(t, "the acknowledgement counted", func() bool { return b.l.Stats().Acked >= 1 })
	if s := b.l.Stats(); s.Acked != 1 || s.InFlight != 0 {
		t.Fatalf("stats = %+v", s)
	}
}

func TestListener_RoutesSettledMessagesToSubscribersOnce(t *testing.T) {
	t.Parallel()
	sink := testsink.New(false)
	b := setup(t, sink, func(o *Options) { o.Anonymous.Subscribe = []string{"factory/#"} })
	got := make(chan string, 10)
	sub := publisher(t, b.url, func(o *paho.ClientOptions) {
		o.SetDefaultPublishHandler(func(_ paho.Client, m paho.Message) { got <- string(m.Payload()) })
	})
	waitToken(t, sub.Subscribe("factory/#", 1, nil))
	pub := publisher(t, b.url, nil)
	tok := pub.Publish("factory/5/telemetry", 1, false, "fan-out")
	d := sink.Next(t)
	select {
	case p := <-got:
		t.Fatalf("subscriber got %q before the message was settled", p)
	default:
	}
	d.Done()
	waitToken(t, tok)
	select {
	case p := <-got:
		if p != "fan-out" {
			t.Fatalf("subscriber got %q", p)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("subscriber got nothing")
	}
	// A second publish is a barrier: once it reached the sink, a duplicate
	// ingestion of the first (through the inline re-publication) would have too.
	waitToken(t, pub.Publish("factory/5/telemetry", 0, false, "barrier"))
	if d := sink.Next(t); string(d.Msg.Payload) != "barrier" {
		t.Fatalf("sink got %q again", d.Msg.Payload)
	}
	if s := b.l.Stats(); s.Received != 2 {
		t.Fatalf("stats = %+v", s)
	}
}

func TestListener_DeliversThousandsOfQoS1Messages(t *testing.T) {
	t.Parallel()
	b := setup(t, testsink.New(true), nil)
	pub := publisher(t, b.url, nil)
	const n = 5000
	toks := make([]paho.Token, n)
	for i := range n {
		toks[i] = pub.Publish(fmt.Sprintf("factory/%d/telemetry", i%7), 1, false, fmt.Sprint(i))
	}
	for _, tok := range toks {
		waitToken(t, tok)
	}
	seen := make(map[string]bool, n)
	for range n {
		seen[string(b.sink.Next(t).Msg.Payload)] = true
	}
	if len(seen) != n {
		t.Fatalf("%d distinct messages, want %d", len(seen), n)
	}
	// The acker counts an acknowledgement just after writing its PUBACK.
	testsink.Eventually(t, "every acknowledgement counted", func() bool { return b.l.Stats().Acked >= n })
	if s := b.l.Stats(); s.Received != n || s.Acked != n {
		t.Fatalf("stats = %+v", s)
	}
}

func TestListener_TLS(t *testing.T) {
	t.Parallel()
	files := testtls.Write(t)
	b := setup(t, testsink.New(true), func(o *Options) { o.TLS = files.Server(t, false) })

	t.Run("a client trusting the CA publishes", func(t *testing.T) {
		pub := publisher(t, b.url, func(o *paho.ClientOptions) { o.SetTLSConfig(files.Client(t, false)) })
		waitToken(t, pub.Publish("factory/3/telemetry", 1, false, "secure"))
		if d := b.sink.Next(t); string(d.Msg.Payload) != "secure" {
			t.Fatalf("got %q", d.Msg.Payload)
		}
	})
	t.Run("a client not trusting the CA is refused", func(t *testing.T) {
		c := paho.NewClient(paho.NewClientOptions().AddBroker(b.url).SetClientID("untrusting").SetAutoReconnect(false).
			SetTLSConfig(&tls.Config{RootCAs: x509.NewCertPool()}))
		tok := c.Connect()
		tok.WaitTimeout(10 * time.Second)
		if tok.Error() == nil {
			c.Disconnect(0)
			t.Fatal("connected without trusting the server certificate")
		}
	})
}

func TestListener_UnmatchedTopicsSkipTheSink(t *testing.T) {
	t.Parallel()
	b := setup(t, testsink.New(false), func(o *Options) { o.Anonymous.Publish = []string{"#"} })
	pub := publisher(t, b.url, nil)
	routed := pub.Publish("factory/x", 1, false, "routed")
	d := b.sink.Next(t)
	elsewhere := pub.Publish("other/topic", 1, false, "elsewhere")
	// The unrouted message is acknowledged in its turn: after the routed
	// one before it (a bounded wait for something that must not happen).
	if elsewhere.WaitTimeout(300 * time.Millisecond) {
		t.Fatal("the unrouted message was acknowledged before the routed one before it")
	}
	d.Done()
	waitToken(t, routed)
	waitToken(t, elsewhere)
	b.acks.waitFor(t, 2)
	if acks := b.acks.snapshot(); !slices.Equal(acks, []uint16{1, 2}) {
		t.Fatalf("PUBACKs %v, want [1 2]", acks)
	}
	if s := b.l.Stats(); s.Unrouted != 1 || s.Received != 1 {
		t.Fatalf("stats = %+v", s)
	}
}

func TestNew_RejectsBadConfig(t *testing.T) {
	t.Parallel()
	ok := Options{ID: "x", Listen: "127.0.0.1:0", Topics: []string{"#"}}
	for name, mutate := range map[string]func(*Options){
		"no topics":                   func(o *Options) { o.Topics = nil },
		"user without name":           func(o *Options) { o.Users = []User{{Password: "p"}} },
		"user listed twice":           func(o *Options) { o.Users = []User{{Username: "a", Password: "p"}, {Username: "a", Password: "q"}} },
		"password and hash":           func(o *Options) { o.Users = []User{{Username: "a", Password: "p", PasswordHash: hashOf(t, "p")}} },
		"hash that is no bcrypt hash": func(o *Options) { o.Users = []User{{Username: "a", PasswordHash: "$2a$10$short"}} },
		"bad ACL filter":              func(o *Options) { o.Anonymous.Publish = []string{"a/#/b"} },
		"anonymous on the network":    func(o *Options) { o.Listen = "0.0.0.0:0" },
	} {
		t.Run(name, func(t *testing.T) {
			o := ok
			mutate(&o)
			if _, err := New(o, testsink.New(true), nil); !errors.Is(err, ErrConfig) {
				t.Fatalf("New = %v, want ErrConfig", err)
			}
		})
	}
}

// TestListener_OneComponentKeyPerLogLine: mochi's own log lines and the
// listener's carry one component key each (mochi's logger once had
// component=receiver and component=mochi).
func TestListener_OneComponentKeyPerLogLine(t *testing.T) {
	t.Parallel()
	var buf testservices.Buffer
	l, err := New(Options{ID: "edge", Listen: "127.0.0.1:0", Topics: []string{"factory/#"}}, testsink.New(true),
		slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})))
	if err != nil {
		t.Fatal(err)
	}
	b := start(t, l, nil, nil)
	publisher(t, b.url, nil).Disconnect(0)
	b.stop()
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	mochiLines := 0
	for _, line := range lines {
		if n := strings.Count(line, `"component":`); n != 1 {
			t.Errorf("%d component keys in %s", n, line)
		}
		if strings.Contains(line, `"component":"mochi"`) {
			mochiLines++
		}
	}
	if mochiLines == 0 {
		t.Fatalf("no line of mochi's among %d", len(lines))
	}
}
