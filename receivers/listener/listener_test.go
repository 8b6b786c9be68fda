package listener

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
	mochi "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/gobridge/gobridge/receivers/internal/testsink"
	"github.com/gobridge/gobridge/receivers/internal/testtls"
	"github.com/gobridge/gobridge/routes"
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

func setup(t *testing.T, sink *testsink.Sink, mutate func(*routes.ReceiverConfig)) *bundle {
	t.Helper()
	cfg := routes.ReceiverConfig{
		ID:      "edge",
		Type:    routes.ReceiverMQTTListener,
		Options: routes.ReceiverOptions{Listen: "127.0.0.1:0"},
		Topics:  []routes.Subscription{{Topic: "factory/#"}},
	}
	if mutate != nil {
		mutate(&cfg)
	}
	l, err := New(cfg, sink, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	acks := &ackRecorder{}
	l.extraHooks = []mochi.Hook{acks}
	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() { errc <- l.Run(ctx) }()
	select {
	case <-l.Ready():
	case err := <-errc:
		t.Fatalf("Run: %v", err)
	}
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if err := <-errc; err != nil {
				t.Errorf("Run returned %v", err)
			}
		})
	}
	t.Cleanup(stop)
	scheme := "tcp"
	if cfg.Options.TLS.CertFile != "" {
		scheme = "ssl"
	}
	return &bundle{l: l, sink: sink, acks: acks, url: scheme + "://" + l.Addr().String(), stop: stop}
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
	if s := b.l.Stats(); s.Acked != 1 || s.InFlight != 0 {
		t.Fatalf("stats = %+v", s)
	}
}

func TestListener_AcksInArrivalOrder(t *testing.T) {
	t.Parallel()
	sink := testsink.New(false)
	b := setup(t, sink, nil)
	pub := publisher(t, b.url, nil)
	const n = 50
	var toks []paho.Token
	for i := range n {
		toks = append(toks, pub.Publish("factory/1/seq", 1, false, fmt.Sprint(i)))
	}
	var ds []testsink.Delivery
	for i := range n {
		d := sink.Next(t)
		if string(d.Msg.Payload) != fmt.Sprint(i) {
			t.Fatalf("message %d arrived as %q", i, d.Msg.Payload)
		}
		ds = append(ds, d)
	}
	// All n are in flight at once; settle them last first, from other
	// goroutines.
	for i := n - 1; i >= 0; i-- {
		go ds[i].Done()
	}
	for _, tok := range toks {
		waitToken(t, tok)
	}
	b.acks.waitFor(t, n)
	acks := b.acks.snapshot()
	if len(acks) != n {
		t.Fatalf("%d PUBACKs, want %d", len(acks), n)
	}
	if !slices.IsSorted(acks) { // paho numbers a fresh client's messages 1, 2, 3, ...
		t.Fatalf("PUBACKs out of order: %v", acks)
	}
}

func TestListener_RoutesSettledMessagesToSubscribersOnce(t *testing.T) {
	t.Parallel()
	sink := testsink.New(false)
	b := setup(t, sink, nil)
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
	if s := b.l.Stats(); s.Received != n || s.Acked != n {
		t.Fatalf("stats = %+v", s)
	}
}

func TestListener_Users(t *testing.T) {
	t.Parallel()
	b := setup(t, testsink.New(true), func(c *routes.ReceiverConfig) {
		c.Options.Users = []routes.User{{Username: "press-1", Password: "s3cret"}}
	})

	t.Run("bad password is refused", func(t *testing.T) {
		for _, pw := range []string{"wrong", ""} {
			c := paho.NewClient(paho.NewClientOptions().AddBroker(b.url).SetClientID("bad-" + pw).
				SetUsername("press-1").SetPassword(pw).SetAutoReconnect(false))
			tok := c.Connect()
			if !tok.WaitTimeout(10 * time.Second) {
				t.Fatal("connect timed out")
			}
			if tok.Error() == nil {
				c.Disconnect(0)
				t.Fatalf("password %q was accepted", pw)
			}
		}
		c := paho.NewClient(paho.NewClientOptions().AddBroker(b.url).SetClientID("anon").SetAutoReconnect(false))
		if tok := c.Connect(); tok.WaitTimeout(10*time.Second) && tok.Error() == nil {
			c.Disconnect(0)
			t.Fatal("anonymous client was accepted")
		}
	})
	t.Run("right password publishes", func(t *testing.T) {
		pub := publisher(t, b.url, func(o *paho.ClientOptions) { o.SetUsername("press-1").SetPassword("s3cret") })
		waitToken(t, pub.Publish("factory/2/telemetry", 1, false, "hi"))
		if d := b.sink.Next(t); string(d.Msg.Payload) != "hi" {
			t.Fatalf("got %q", d.Msg.Payload)
		}
	})
}

func TestListener_TLS(t *testing.T) {
	t.Parallel()
	files := testtls.Write(t)
	b := setup(t, testsink.New(true), func(c *routes.ReceiverConfig) {
		c.Options.TLS = routes.TLS{CertFile: files.CertFile, KeyFile: files.KeyFile}
	})
	pem, err := os.ReadFile(files.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)

	t.Run("a client trusting the CA publishes", func(t *testing.T) {
		pub := publisher(t, b.url, func(o *paho.ClientOptions) { o.SetTLSConfig(&tls.Config{RootCAs: pool}) })
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
	b := setup(t, testsink.New(true), nil)
	pub := publisher(t, b.url, nil)
	waitToken(t, pub.Publish("other/topic", 1, false, "elsewhere"))
	waitToken(t, pub.Publish("factory/x", 1, false, "routed"))
	if d := b.sink.Next(t); string(d.Msg.Payload) != "routed" {
		t.Fatalf("sink got %q first", d.Msg.Payload)
	}
	if s := b.l.Stats(); s.Unrouted != 1 || s.Received != 1 {
		t.Fatalf("stats = %+v", s)
	}
}

func TestListener_StopWithoutAckingUnsettled(t *testing.T) {
	t.Parallel()
	b := setup(t, testsink.New(false), nil)
	pub := publisher(t, b.url, nil)
	tok := pub.Publish("factory/9/telemetry", 1, false, "held")
	b.sink.Next(t) // never settled
	b.stop()
	if n := b.acks.count(); n != 0 {
		t.Fatalf("broker wrote %d PUBACKs for an unsettled message", n)
	}
	if tok.WaitTimeout(0) && tok.Error() == nil {
		t.Fatal("publisher's token completed without error")
	}
	if s := b.l.Stats(); s.Abandoned != 1 || s.Acked != 0 {
		t.Fatalf("stats = %+v", s)
	}
	if st := b.l.Status(); st.Connected {
		t.Fatalf("status after stop = %+v", st)
	}
}

func TestNew_RejectsBadConfig(t *testing.T) {
	t.Parallel()
	for name, cfg := range map[string]routes.ReceiverConfig{
		"no topics":         {ID: "x"},
		"cert without key":  {ID: "x", Topics: []routes.Subscription{{Topic: "#"}}, Options: routes.ReceiverOptions{TLS: routes.TLS{CertFile: "a.pem"}}},
		"user without name": {ID: "x", Topics: []routes.Subscription{{Topic: "#"}}, Options: routes.ReceiverOptions{Users: []routes.User{{Password: "p"}}}},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := New(cfg, testsink.New(true), nil); err == nil {
				t.Fatal("New accepted it")
			}
		})
	}
}
