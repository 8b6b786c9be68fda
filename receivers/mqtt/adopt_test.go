package mqtt

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/gobridge/gobridge/internal/testservices"
	"github.com/gobridge/gobridge/receivers"
	"github.com/gobridge/gobridge/receivers/internal/testsink"
)

// runAdopted runs r in the background; the returned function waits up to
// 30s for Run to return and yields its error.
func runAdopted(t *testing.T, r *Receiver) func() error {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	var err error
	go func() { err = r.Run(ctx); close(done) }()
	wait := func() error {
		t.Helper()
		select {
		case <-done:
			return err
		case <-time.After(30 * time.Second):
			t.Fatal("Run did not return within 30s")
			return nil
		}
	}
	t.Cleanup(func() {
		cancel()
		wait()
	})
	return wait
}

// A receiver in Adopt mode takes over the persistent session another
// client left (DESIGN.md §11.7): it gets what the broker queued for that
// session, without subscribing itself, acknowledges it, and counts it in the
// window it shares with the receiver it stands in for. A second CONNECT with
// the same client id (a session takeover) ends it instead of being fought
// back.
func TestReceiver_AdoptTakesOverALeftSession(t *testing.T) {
	t.Parallel()
	url := testservices.MQTTURL(t)
	id := unique(t)
	topic := "gbtest/" + id + "/adopt"
	win := receivers.NewWindow(0)

	// The owner subscribes with a persistent session, then goes away.
	owner := config(url, id, topic)
	owner.Window = win
	r1 := newReceiver(t, owner, testsink.New(true))
	run1 := run(t, r1)
	waitSubscribed(t, r1)
	run1.stop()
	publish(t, url, topic, "a", "b", "c")

	adopt := config(url, id, "gbtest/"+id+"/never-subscribed")
	adopt.Window, adopt.Adopt = win, true
	sink := testsink.New(true)
	r2 := newReceiver(t, adopt, sink)
	wait := runAdopted(t, r2)
	var got []string
	for range 3 {
		got = append(got, string(sink.Next(t).Msg.Payload))
	}
	if !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Fatalf("adopted session delivered %v", got)
	}
	testsink.Eventually(t, "3 acks in the shared window", func() bool { return win.Stats().Acked == 3 })
	if s := r2.Status(); !s.Connected || !s.Subscribed {
		t.Errorf("adopting receiver status = %+v", s)
	}
	publish(t, url, "gbtest/"+id+"/never-subscribed", "x")

	// Another client connects with the same id: the adopter lets go.
	c := paho.NewClient(paho.NewClientOptions().AddBroker(url).SetClientID(id).SetCleanSession(false).SetAutoReconnect(false))
	if tok := c.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("connect: %v", tok.Error())
	}
	defer c.Disconnect(100)
	if err := wait(); !errors.Is(err, ErrConnectionLost) {
		t.Fatalf("Run after a session takeover = %v, want ErrConnectionLost", err)
	}
	if n := len(sink.C); n != 0 {
		t.Errorf("the adopter got %d more messages: it subscribed to its own topics", n)
	}
}

// With no session left at the broker there is nothing to adopt: Run
// returns ErrNoSession at once.
func TestReceiver_AdoptWithoutASession(t *testing.T) {
	t.Parallel()
	url := testservices.MQTTURL(t)
	o := config(url, unique(t), "gbtest/none")
	o.Adopt = true
	r := newReceiver(t, o, testsink.New(true))
	wait := runAdopted(t, r)
	if err := wait(); !errors.Is(err, ErrNoSession) {
		t.Fatalf("Run = %v, want ErrNoSession", err)
	}
	o.CleanSession = true
	if _, err := New(o, testsink.New(true), nil); !errors.Is(err, ErrConfig) {
		t.Errorf("Adopt with a clean session: New = %v, want ErrConfig", err)
	}
}
