package mqtt

import (
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/gobridge/gobridge/internal/churn"
	"github.com/gobridge/gobridge/internal/testservices"
	"github.com/gobridge/gobridge/receivers/internal/testsink"
)

// TestReceiver_ConnectionLossChurnLeavesNothingBehind has Mosquitto drop
// the receiver's connection hundreds of times, by taking over its client
// ID from another client (persistent session kept), with a QoS 1 message
// delivered before each loss and, every third round, one published just
// before it (in flight across the loss: the broker redelivers it).
// Goroutines, heap, descriptors and the receiver's in-flight counts must
// not grow with the number of losses.
func TestReceiver_ConnectionLossChurnLeavesNothingBehind(t *testing.T) {
	url := testservices.MQTTURL(t)
	id := unique(t)
	topic := "churn/" + id
	sink := testsink.New(true)
	o := config(url, "churn-"+id, topic+"/#")
	r, err := New(o, sink, slog.New(slog.DiscardHandler)) // hundreds of "connection lost" lines are expected
	if err != nil {
		t.Fatal(err)
	}
	// paho backs off (1 s doubling to MaxReconnectInterval) when a loss
	// follows the last one within seconds: the cap is lowered so that
	// hundreds of losses fit in the test. Everything else is as in use.
	r.opts.SetMaxReconnectInterval(10 * time.Millisecond)
	run(t, r)
	waitSubscribed(t, r)
	pub := paho.NewClient(paho.NewClientOptions().AddBroker(url).SetClientID("churn-pub-" + id).SetAutoReconnect(false))
	if tok := pub.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("publisher connect: %v", tok.Error())
	}
	t.Cleanup(func() { pub.Disconnect(100) })
	taker := paho.NewClientOptions().AddBroker(url).SetClientID(o.ClientID).SetCleanSession(false).
		SetAutoReconnect(false).SetConnectRetry(false)

	round := func(i int) {
		body := fmt.Sprintf("m-%d", i)
		if tok := pub.Publish(topic+"/x", 1, false, body); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
			t.Fatalf("publish: %v", tok.Error())
		}
		for d := sink.Next(t); string(d.Msg.Payload) != body; d = sink.Next(t) {
		}
		if i%3 == 0 {
			pub.Publish(topic+"/x", 1, false, body+"-in-flight") // crosses the loss
		}
		connects := r.connects.Load()
		c := paho.NewClient(taker) // Mosquitto drops the receiver's connection
		if tok := c.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
			t.Fatalf("take over: %v", tok.Error())
		}
		c.Disconnect(0)
		testsink.Eventually(t, "reconnected", func() bool {
			s := r.Status()
			return r.connects.Load() > connects && s.Connected && s.Subscribed
		})
	}
	counts := func() map[string]int {
		st := r.Stats()
		return map[string]int{"inflight": st.InFlight, "inflight_bytes": int(st.InFlightBytes), "dispatch_queue": len(r.toDispatch)}
	}
	n2 := 150
	if s := os.Getenv("CHURN_ROUNDS"); s != "" {
		n2, _ = strconv.Atoi(s)
	}
	churn.Check(t, n2/3, n2, churn.Tolerance{Goroutines: 5, FDs: 3, HeapBytes: 512 << 10}, counts, round)
}
