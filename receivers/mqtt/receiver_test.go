package mqtt

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gobridge/gobridge/internal/testservices"
	"github.com/gobridge/gobridge/receivers/internal/testsink"
	"github.com/gobridge/gobridge/receivers/internal/testtls"
	"github.com/gobridge/gobridge/receivers/listener"
)

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// unique returns a topic prefix and client-id suffix no other test run uses.
func unique(t *testing.T) string {
	return fmt.Sprintf("%s-%d", strings.ReplaceAll(t.Name(), "/", "-"), time.Now().UnixNano())
}

func config(url, clientID string, filters ...string) Options {
	o := Options{ID: "plant", BrokerURLs: []string{url}, ClientID: clientID, ConnectTimeout: 5 * time.Second}
	for _, f := range filters {
		o.Topics = append(o.Topics, Subscription{Filter: f, QoS: 1})
	}
	return o
}

func newReceiver(t *testing.T, o Options, sink *testsink.Sink) *Receiver {
	t.Helper()
	r, err := New(o, sink, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestReceiver_DeliversQoS1FromMosquitto(t *testing.T) {
	t.Parallel()
	url := testservices.MQTTURL(t)
	id := unique(t)
	sink := testsink.New(true)
	r := newReceiver(t, config(url, id, "gbtest/"+id+"/+/telemetry"), sink)
	run(t, r)
	waitSubscribed(t, r)

	publish(t, url, "gbtest/"+id+"/a/telemetry", "1", "2", "3")
	publish(t, url, "gbtest/"+id+"/a/other", "not subscribed")
	for i := 1; i <= 3; i++ {
		d := sink.Next(t)
		if string(d.Msg.Payload) != fmt.Sprint(i) || d.Msg.QoS != 1 || d.Msg.Receiver != "plant" ||
			d.Msg.Topic != "gbtest/"+id+"/a/telemetry" || d.Msg.ReceivedAt.IsZero() {
			t.Fatalf("message %d = %+v", i, d.Msg)
		}
	}
	testsink.Eventually(t, "3 acks", func() bool { return r.Stats().Acked == 3 })
	if s := r.Stats(); s.Received != 3 || s.InFlight != 0 || s.Dropped != 0 {
		t.Fatalf("stats = %+v", s)
	}
}

func TestReceiver_RedeliversUnackedAfterRestart(t *testing.T) {
	t.Parallel()
	url := testservices.MQTTURL(t)
	id := unique(t)
	topic := "gbtest/" + id + "/redeliver"
	cfg := config(url, id, topic) // clean_session false: a persistent session

	first := testsink.New(false) // never settles
	r1 := newReceiver(t, cfg, first)
	run1 := run(t, r1)
	waitSubscribed(t, r1)
	publish(t, url, topic, "a", "b", "c")
	for range 3 {
		first.Next(t)
	}
	run1.stop()
	if s := r1.Stats(); s.Acked != 0 || s.Abandoned != 3 {
		t.Fatalf("first receiver stats = %+v", s)
	}

	second := testsink.New(true)
	r2 := newReceiver(t, cfg, second)
	run2 := run(t, r2)
	var got []string
	for range 3 {
		d := second.Next(t)
		got = append(got, string(d.Msg.Payload))
		if !d.Msg.Duplicate {
			t.Errorf("redelivered %q without the DUP flag", d.Msg.Payload)
		}
	}
	if !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Fatalf("redelivered %v", got)
	}
	testsink.Eventually(t, "redeliveries acked", func() bool { return r2.Stats().Acked == 3 })
	run2.stop()

	// Acknowledged now: a third session gets only what is new.
	third := testsink.New(true)
	r3 := newReceiver(t, cfg, third)
	run(t, r3)
	waitSubscribed(t, r3)
	publish(t, url, topic, "fresh")
	if d := third.Next(t); string(d.Msg.Payload) != "fresh" {
		t.Fatalf("third session got %q first: acks were lost", d.Msg.Payload)
	}
}

func TestReceiver_SharedSubscriptionSplitsMessages(t *testing.T) {
	t.Parallel()
	url := testservices.MQTTURL(t)
	id := unique(t)
	topic := "gbtest/" + id + "/shared"
	filter := "$share/gobridge-" + id + "/" + topic
	sinkA, sinkB := testsink.New(true), testsink.New(true)
	ra := newReceiver(t, config(url, id+"-a", filter), sinkA)
	rb := newReceiver(t, config(url, id+"-b", filter), sinkB)
	run(t, ra)
	run(t, rb)
	waitSubscribed(t, ra)
	waitSubscribed(t, rb)

	const n = 100
	payloads := make([]string, n)
	for i := range payloads {
		payloads[i] = fmt.Sprint(i)
	}
	publish(t, url, topic, payloads...)
	testsink.Eventually(t, "all shared messages at the sinks", func() bool {
		return len(sinkA.C)+len(sinkB.C) == n
	})
	a, b := ra.Stats().Received, rb.Stats().Received
	if a == 0 || b == 0 {
		t.Fatalf("not split: a got %d, b got %d", a, b)
	}
	seen := map[string]bool{}
	for _, s := range []*testsink.Sink{sinkA, sinkB} {
		for len(s.C) > 0 {
			seen[string((<-s.C).Msg.Payload)] = true
		}
	}
	if len(seen) != n {
		t.Fatalf("%d distinct messages, want %d", len(seen), n)
	}
}

func TestReceiver_ReconnectsAfterBrokerRestart(t *testing.T) {
	t.Parallel()
	m := startMosquitto(t)
	url := "tcp://" + m.addr()
	sink := testsink.New(true)
	r := newReceiver(t, config(url, "gobridge-reconnect", "plant/#"), sink)
	run(t, r)
	waitSubscribed(t, r)

	m.stop()
	testsink.Eventually(t, "status shows the loss", func() bool {
		s := r.Status()
		return !s.Connected && !s.Subscribed && s.Reason != ""
	})
	t.Logf("while down: %+v", r.Status())

	// The broker comes back without persistence: the subscription must be
	// made again by the receiver.
	m.start()
	waitSubscribed(t, r)
	if s := r.Status(); s.Reason != "" {
		t.Fatalf("ready with a reason: %+v", s)
	}
	if n := r.Stats().Reconnects; n < 1 {
		t.Fatalf("reconnects = %d", n)
	}
	publish(t, url, "plant/after", "back")
	if d := sink.Next(t); string(d.Msg.Payload) != "back" {
		t.Fatalf("got %q", d.Msg.Payload)
	}
}

func TestReceiver_ReportsRefusedSubscription(t *testing.T) {
	t.Parallel()
	url := startBroker(t, 2) // refuses filters under secret/
	r := newReceiver(t, config(url, "gobridge-refused", "allowed/#", "secret/#"), testsink.New(true))
	run(t, r)
	testsink.Eventually(t, "refusal reported", func() bool {
		s := r.Status()
		return s.Connected && !s.Subscribed && strings.Contains(s.Reason, "secret/#")
	})
	t.Logf("refused: %+v", r.Status())
}

func TestReceiver_TLSWithPrivateCA(t *testing.T) {
	t.Parallel()
	files := testtls.Write(t)

	t.Run("embedded listener", func(t *testing.T) {
		t.Parallel()
		l, err := listener.New(listener.Options{ID: "edge", Listen: "127.0.0.1:0", TLS: files.Server(t, false),
			Topics: []string{"nothing/here"}, Anonymous: listener.ACL{Subscribe: []string{"tls/#"}}}, testsink.New(true), testLogger(t))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- l.Run(ctx) }()
		t.Cleanup(func() { cancel(); <-done })
		<-l.Ready()
		o := config("ssl://"+l.Addr().String(), "gobridge-tls", "tls/#")
		o.TLS = files.Client(t, false)
		r := newReceiver(t, o, testsink.New(true))
		run(t, r)
		waitSubscribed(t, r)
	})
	t.Run("mosquitto", func(t *testing.T) {
		t.Parallel()
		m := startMosquitto(t, "cafile "+files.CAFile, "certfile "+files.CertFile, "keyfile "+files.KeyFile)
		o := config("ssl://"+m.addr(), "gobridge-tls-mosq", "tls/#")
		o.TLS = files.Client(t, false)
		o.MayConnect = func() error { return nil } // the receiver's own dial (paho's: the listener above)
		r := newReceiver(t, o, testsink.New(true))
		run(t, r)
		waitSubscribed(t, r)

		untrusting := config("ssl://"+m.addr(), "gobridge-tls-untrusting", "tls/#")
		r2 := newReceiver(t, untrusting, testsink.New(true)) // system roots only
		run(t, r2)
		testsink.Eventually(t, "certificate error reported", func() bool { return r2.Status().Reason != "not connected yet" })
		if s := r2.Status(); s.Connected {
			t.Fatalf("connected without trusting the CA: %+v", s)
		}
	})
}

func TestNew_RejectsBadConfig(t *testing.T) {
	t.Parallel()
	for name, mutate := range map[string]func(*Options){
		"no broker":      func(o *Options) { o.BrokerURLs = nil },
		"unknown scheme": func(o *Options) { o.BrokerURLs = []string{"http://x"} },
		"no client id":   func(o *Options) { o.ClientID = "" },
		"no topics":      func(o *Options) { o.Topics = nil },
		"qos 3":          func(o *Options) { o.Topics[0].QoS = 3 },
		"bad filter":     func(o *Options) { o.Topics[0].Filter = "a/#/b" },
		"unparsable URL": func(o *Options) { o.BrokerURLs = []string{"tcp://user:pa ss@[::1"} },
	} {
		t.Run(name, func(t *testing.T) {
			o := config("tcp://127.0.0.1:1", "x", "a/#")
			mutate(&o)
			_, err := New(o, testsink.New(true), nil)
			if !errors.Is(err, ErrConfig) {
				t.Fatalf("New = %v, want ErrConfig", err)
			}
			if strings.Contains(fmt.Sprint(err), "pa ss") {
				t.Fatalf("the error shows the password: %v", err)
			}
		})
	}
}

func TestReceiver_RunTwice(t *testing.T) {
	t.Parallel()
	r := newReceiver(t, config("tcp://127.0.0.1:1", "x", "a"), testsink.New(true))
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := r.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if err := r.Run(ctx); !errors.Is(err, ErrAlreadyRun) {
		t.Fatalf("second Run = %v", err)
	}
}

func TestReceiver_UnreachableBrokerIsRetriedAndReported(t *testing.T) {
	t.Parallel()
	r := newReceiver(t, config("tcp://127.0.0.1:1", "gobridge-unreachable", "a/#"), testsink.New(true))
	rr := run(t, r)
	testsink.Eventually(t, "connect failure reported", func() bool {
		return strings.HasPrefix(r.Status().Reason, "connect to tcp://127.0.0.1:1")
	})
	t.Logf("status: %+v", r.Status())
	rr.stop() // must return although paho is still retrying
	if s := r.Status(); s.Connected || s.Reason != "stopped" {
		t.Fatalf("status after stop = %+v", s)
	}
}

func TestReceiver_RedeliversAfterConnectionLoss(t *testing.T) {
	t.Parallel()
	m := startMosquitto(t)
	url := "tcp://" + m.addr()
	sink := testsink.New(false)
	r := newReceiver(t, config(url, "gobridge-connloss", "plant/#"), sink)
	rr := run(t, r)
	waitSubscribed(t, r)
	publish(t, url, "plant/1", "a", "b")
	old := []testsink.Delivery{sink.Next(t), sink.Next(t)}

	// The broker goes away (saving the session) and comes back while both
	// messages are unsettled: it redelivers them on the new connection.
	m.shutdown()
	testsink.Eventually(t, "disconnected", func() bool { return !r.Status().Connected })
	m.start()
	waitSubscribed(t, r)
	var again []string
	for range 2 {
		d := sink.Next(t)
		again = append(again, string(d.Msg.Payload))
		if !d.Msg.Duplicate {
			t.Errorf("redelivery of %q has no DUP flag", d.Msg.Payload)
		}
		d.Done()
	}
	if !slices.Equal(again, []string{"a", "b"}) {
		t.Fatalf("redelivered %v", again)
	}
	// Settling the first copies late is harmless (paho drops acks of a dead
	// connection) and unblocks the in-order acker for the redelivered ones.
	for _, d := range old {
		d.Done()
	}
	testsink.Eventually(t, "all acked", func() bool { return r.Stats().Acked == 4 })

	// The broker now holds nothing for us: a new session of the same client
	// (after a clean DISCONNECT, which follows the PUBACKs on the wire) gets
	// only new messages.
	rr.stop()
	next := testsink.New(true)
	r2 := newReceiver(t, config(url, "gobridge-connloss", "plant/#"), next)
	run(t, r2)
	waitSubscribed(t, r2)
	publish(t, url, "plant/1", "c")
	if d := next.Next(t); string(d.Msg.Payload) != "c" {
		t.Fatalf("got %q: the redelivered messages were not acknowledged", d.Msg.Payload)
	}
}
