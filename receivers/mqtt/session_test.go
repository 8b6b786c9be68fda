package mqtt

import (
	"fmt"
	"slices"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/gobridge/gobridge/receivers/internal/testsink"
)

// publishQoS2 sends QoS 2 messages through a fresh paho client and waits
// for each PUBCOMP.
func publishQoS2(t *testing.T, url, topic string, payloads ...string) {
	t.Helper()
	c := paho.NewClient(paho.NewClientOptions().AddBroker(url).
		SetClientID(fmt.Sprintf("pub2-%d", time.Now().UnixNano())).SetAutoReconnect(false))
	if tok := c.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("publisher connect: %v", tok.Error())
	}
	defer c.Disconnect(100)
	for _, p := range payloads {
		if tok := c.Publish(topic, 2, false, p); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
			t.Fatalf("publish: %v", tok.Error())
		}
	}
}

// nextPayloads takes n deliveries from sink and returns their payloads,
// failing when one lacks the DUP flag and dup is set.
func nextPayloads(t *testing.T, sink *testsink.Sink, n int, dup bool) (got []string, ds []testsink.Delivery) {
	t.Helper()
	for range n {
		d := sink.Next(t)
		if dup && !d.Msg.Duplicate {
			t.Errorf("redelivery of %q has no DUP flag", d.Msg.Payload)
		}
		got, ds = append(got, string(d.Msg.Payload)), append(ds, d)
	}
	return got, ds
}

// TestReceiver_QoS2FromMosquitto: a QoS 2 message gets its PUBREC only
// once settled. Of three messages, the first is settled and the receiver
// stops: Mosquitto redelivers the other two (DUP) to the next session, and
// not the first, whose PUBREL/PUBCOMP the next session completes.
func TestReceiver_QoS2FromMosquitto(t *testing.T) {
	t.Parallel()
	m := startMosquitto(t)
	url := "tcp://" + m.addr()
	o := config(url, "gobridge-qos2", "plant/#")
	o.Topics[0].QoS = 2
	first := testsink.New(false)
	r := newReceiver(t, o, first)
	rr := run(t, r)
	waitSubscribed(t, r)
	publishQoS2(t, url, "plant/1", "a", "b", "c")
	got, ds := nextPayloads(t, first, 3, false)
	if !slices.Equal(got, []string{"a", "b", "c"}) || ds[0].Msg.QoS != 2 {
		t.Fatalf("got %v (QoS %d)", got, ds[0].Msg.QoS)
	}
	ds[0].Done()
	testsink.Eventually(t, "a acknowledged", func() bool { return r.Stats().Acked == 1 })
	rr.stop()

	second := testsink.New(true)
	r2 := newReceiver(t, o, second)
	run(t, r2)
	waitSubscribed(t, r2)
	publishQoS2(t, url, "plant/1", "d")
	if got, _ := nextPayloads(t, second, 2, true); !slices.Equal(got, []string{"b", "c"}) {
		t.Fatalf("redelivered %v, want [b c]", got)
	}
	if d := second.Next(t); string(d.Msg.Payload) != "d" || d.Msg.Duplicate {
		t.Fatalf("then got %q (dup %v), want the new d", d.Msg.Payload, d.Msg.Duplicate)
	}
}

// TestReceiver_AcksOfALostSessionAckNothingNew: the broker dies without
// saving (SIGKILL) while three messages are unsettled, and comes back
// without the session; the new connection's messages get the same packet
// IDs again (Mosquitto starts at 1). Settling the old copies afterwards
// must not acknowledge the new messages: paho drops acks of a dead
// connection, so the next session gets the new ones again.
func TestReceiver_AcksOfALostSessionAckNothingNew(t *testing.T) {
	t.Parallel()
	m := startMosquitto(t)
	url := "tcp://" + m.addr()
	o := config(url, "gobridge-lost-session", "plant/#")
	sink := testsink.New(false)
	r := newReceiver(t, o, sink)
	rr := run(t, r)
	waitSubscribed(t, r)
	publish(t, url, "plant/1", "a", "b", "c")
	_, old := nextPayloads(t, sink, 3, false)
	m.stop()
	testsink.Eventually(t, "disconnected", func() bool { return !r.Status().Connected })
	m.start()
	waitSubscribed(t, r) // the broker forgot the subscription: made again
	publish(t, url, "plant/1", "x", "y", "z")
	if got, _ := nextPayloads(t, sink, 3, false); !slices.Equal(got, []string{"x", "y", "z"}) {
		t.Fatalf("after the restart got %v", got)
	}
	for _, d := range old {
		d.Done()
	}
	testsink.Eventually(t, "old copies settled", func() bool { return r.Stats().Acked == 3 })
	rr.stop()

	next := testsink.New(true)
	run(t, newReceiver(t, o, next))
	if got, _ := nextPayloads(t, next, 3, true); !slices.Equal(got, []string{"x", "y", "z"}) {
		t.Fatalf("the next session got %v, want x y z again (unacknowledged)", got)
	}
}
