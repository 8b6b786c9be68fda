package mqtt

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/gobridge/gobridge/internal/testservices"
	"github.com/gobridge/gobridge/receivers/internal/testsink"
)

func TestReceiver_QoSGrants(t *testing.T) {
	t.Parallel()
	t.Run("QoS 0 for a QoS 1 subscription is not ready", func(t *testing.T) {
		t.Parallel()
		r := newReceiver(t, config(startBroker(t, 0), "gobridge-qos0", "a/#"), testsink.New(true))
		run(t, r)
		testsink.Eventually(t, "the downgrade reported", func() bool {
			s := r.Status()
			return s.Connected && !s.Subscribed && strings.Contains(s.Reason, "granted QoS 0")
		})
		t.Logf("status: %+v", r.Status())
	})
	t.Run("QoS 1 for a QoS 2 subscription is ready", func(t *testing.T) {
		t.Parallel()
		o := config(startBroker(t, 1), "gobridge-qos1", "a/#")
		o.Topics[0].QoS = 2
		r := newReceiver(t, o, testsink.New(true))
		run(t, r)
		waitSubscribed(t, r)
	})
}

// records is a slog handler keeping every record.
type records struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (h *records) Enabled(context.Context, slog.Level) bool { return true }
func (h *records) WithAttrs([]slog.Attr) slog.Handler       { return h } // attrs are not needed here
func (h *records) WithGroup(string) slog.Handler            { return h }
func (h *records) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.recs = append(h.recs, r.Clone())
	return nil
}

func (h *records) text() (all string, warns int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	var b strings.Builder
	for _, r := range h.recs {
		if r.Level == slog.LevelWarn {
			warns++
		}
		fmt.Fprintf(&b, "%s %s", r.Level, r.Message)
		r.Attrs(func(a slog.Attr) bool { fmt.Fprintf(&b, " %s=%v", a.Key, a.Value); return true })
		b.WriteByte('\n')
	}
	return b.String(), warns
}

// TestReceiver_BrokerDownAtStart: while the broker is down, paho retries
// every second; the receiver logs the failures at attempts 1, 2, 4, ...,
// not at every attempt, and never prints the password of a broker URL.
func TestReceiver_BrokerDownAtStart(t *testing.T) {
	t.Parallel()
	logs := &records{}
	o := config("tcp://plant:hunter2@127.0.0.1:1", "gobridge-down", "a/#")
	r, err := New(o, testsink.New(true), slog.New(logs))
	if err != nil {
		t.Fatal(err)
	}
	rr := run(t, r)
	testsink.Eventually(t, "5 failed attempts", func() bool { return strings.Contains(r.Status().Reason, "(attempt 5)") })
	rr.stop()
	text, warns := logs.text()
	t.Logf("logs:\n%s", text)
	if warns > 3 {
		t.Errorf("%d warnings for 5 failed attempts, want at most 3 (attempts 1, 2, 4)", warns)
	}
	if !strings.Contains(text, "attempt=4") {
		t.Error("the log does not count the attempts")
	}
	for _, s := range []string{text, r.Status().Reason, fmt.Sprint(r.Status())} {
		if strings.Contains(s, "hunter2") {
			t.Errorf("the password leaked: %s", s)
		}
	}
	if !strings.Contains(text, "tcp://plant:xxxxx@127.0.0.1:1") || strings.Contains(text, "{") {
		t.Error("broker URLs are not printed as redacted URLs")
	}
}

// TestReceiver_RefusedSubscriptionDoesNotCostTheOthers: a broker that
// refuses one filter (an ACL) must not keep the receiver from subscribing
// to the others: it reports the refusal and still receives what the other
// filters match.
func TestReceiver_RefusedSubscriptionDoesNotCostTheOthers(t *testing.T) {
	t.Parallel()
	url := startBroker(t, 2) // refuses filters under secret/
	sink := testsink.New(true)
	r := newReceiver(t, config(url, "gobridge-refused-first", "secret/#", "allowed/#"), sink)
	run(t, r)
	testsink.Eventually(t, "refusal reported", func() bool {
		s := r.Status()
		return s.Connected && !s.Subscribed && strings.Contains(s.Reason, "secret/#")
	})
	publish(t, url, "allowed/1", "still flows")
	if d := sink.Next(t); string(d.Msg.Payload) != "still flows" {
		t.Fatalf("got %q", d.Msg.Payload)
	}
}

// TestReceiver_StatusShowsALossWhileIngestPushesBack: while the sink holds
// every message (a full outbox), the receiver stops reading the socket, so
// paho's keep-alive drops the connection; paho reports the loss only once
// the receiver reads again. Status must say disconnected meanwhile.
func TestReceiver_StatusShowsALossWhileIngestPushesBack(t *testing.T) {
	t.Parallel()
	url := testservices.MQTTURL(t)
	id := unique(t)
	topic := "gbtest/" + id + "/held"
	sink := testsink.New(false) // never settles: ingest pushes back
	o := config(url, id, topic)
	o.CleanSession, o.KeepAlive, o.MaxInflightBytes = true, time.Second, 4<<10
	r := newReceiver(t, o, sink)
	run(t, r)
	waitSubscribed(t, r)
	payload := strings.Repeat("p", 1500)
	// The third waits for room, holding paho's router; each of paho's
	// unbuffered stages between the socket and the router then holds one
	// more, and the reader behind them stops reading: PINGRESPs go unread.
	publish(t, url, topic, slices.Repeat([]string{payload}, 10)...)
	sink.Next(t)
	sink.Next(t)
	deadline := time.Now().Add(60 * time.Second) // paho gives up on a PINGRESP after 10s
	for r.Status().Connected {
		if time.Now().After(deadline) {
			t.Fatalf("status still %+v: the connection has been dead for a while", r.Status())
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("status: %+v", r.Status())
}

// TestReceiver_ASUBACKLateBehindPushbackStillSubscribes: a persistent
// session's queued messages reach the receiver before the SUBACK of its
// SUBSCRIBE; while the sink holds them (a full outbox), the SUBACK waits
// behind them for more than subscribeTimeout. Once ingest takes messages
// again, the receiver must report itself subscribed, not keep the stale
// "no SUBACK" reason until the next reconnect.
func TestReceiver_ASUBACKLateBehindPushbackStillSubscribes(t *testing.T) {
	t.Parallel()
	url := testservices.MQTTURL(t)
	id := unique(t)
	topic := "gbtest/" + id + "/late"
	o := config(url, id, topic)
	first := run(t, newReceiver(t, o, testsink.New(true)))
	waitSubscribed(t, first.r)
	first.stop()
	payload := strings.Repeat("p", 1500)
	publish(t, url, topic, slices.Repeat([]string{payload}, 10)...) // queued in the session

	sink := testsink.New(false) // holds what it takes: the third message waits for room
	o.KeepAlive, o.MaxInflightBytes = 2*time.Minute, 4<<10
	r := newReceiver(t, o, sink)
	run(t, r)
	deadline := time.Now().Add(subscribeTimeout + 30*time.Second)
	for !strings.Contains(r.Status().Reason, "no SUBACK") {
		if time.Now().After(deadline) {
			t.Fatalf("status %+v: the SUBACK was expected to wait behind the held messages", r.Status())
		}
		time.Sleep(100 * time.Millisecond) // polling with a deadline
	}
	t.Logf("while held: %+v", r.Status())
	go func() { // ingest takes messages again
		for {
			select {
			case d := <-sink.C:
				d.Done()
			case <-t.Context().Done():
				return
			}
		}
	}()
	waitSubscribed(t, r)
}

// TestReceiver_MayConnectGatesEveryConnection: while MayConnect refuses, no
// CONNECT reaches the broker, so a client already connected with the same
// client id is never kicked off (a leased session's owner, paused past its
// lease, must not take the session back from the survivor that adopted
// it); the attempts are retried, and once MayConnect allows, the receiver
// connects.
func TestReceiver_MayConnectGatesEveryConnection(t *testing.T) {
	t.Parallel()
	url := testservices.MQTTURL(t)
	id := unique(t)
	var kicked atomic.Bool
	holder := paho.NewClient(paho.NewClientOptions().AddBroker(url).SetClientID(id).SetAutoReconnect(false).
		SetConnectionLostHandler(func(paho.Client, error) { kicked.Store(true) }))
	if tok := holder.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("connect the holder: %v", tok.Error())
	}
	defer holder.Disconnect(0)

	var allow atomic.Bool
	var asked atomic.Int32
	o := config(url, id, "gate/"+id+"/#")
	o.MayConnect = func() error {
		asked.Add(1)
		if !allow.Load() {
			return errors.New("lease not confirmed")
		}
		return nil
	}
	r := newReceiver(t, o, testsink.New(true))
	run(t, r)
	testsink.Eventually(t, "a refused attempt retried", func() bool { return asked.Load() >= 2 })
	if kicked.Load() || !holder.IsConnectionOpen() {
		t.Fatal("a refused attempt reached the broker: the holder of the client id was kicked off")
	}
	if r.Status().Connected {
		t.Fatal("connected while MayConnect refused")
	}
	allow.Store(true)
	waitSubscribed(t, r)
	testsink.Eventually(t, "the holder taken over once allowed", kicked.Load)
}
