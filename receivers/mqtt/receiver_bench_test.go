package mqtt

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/gobridge/gobridge/internal/testservices"
	"github.com/gobridge/gobridge/receivers"
	"github.com/gobridge/gobridge/receivers/internal/testsink"
)

// BenchmarkReceiver_QoS1FromMosquitto measures ingest through the receiver
// (ordered queue, dispatcher, in-order acker) with a sink that settles at
// once: b.N QoS 1 messages of 200 bytes, published asynchronously by a
// second paho client, from the first publish until the last is acked.
func BenchmarkReceiver_QoS1FromMosquitto(b *testing.B) {
	url := testservices.MQTTURL(b)
	id := fmt.Sprintf("bench-%d", time.Now().UnixNano())
	topic := "gbtest/" + id + "/bench"
	sink := testsink.Func(func(_ context.Context, _ receivers.Message, done func()) { done() })
	r, err := New(config(url, id, topic), sink, nil)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- r.Run(ctx) }()
	testsink.Eventually(b, "subscribed", func() bool { return r.Status().Subscribed })

	publishQoS1(b, url, id, topic, func() uint64 { return r.Stats().Acked })
	b.StopTimer()
	cancel()
	<-errc
}

// BenchmarkPahoBaseline_QoS1FromMosquitto is the same run with a bare paho
// subscriber (auto-ack in its router goroutine), for comparison.
func BenchmarkPahoBaseline_QoS1FromMosquitto(b *testing.B) {
	url := testservices.MQTTURL(b)
	id := fmt.Sprintf("bench-%d", time.Now().UnixNano())
	topic := "gbtest/" + id + "/bench"
	var got atomic.Int64
	sub := paho.NewClient(paho.NewClientOptions().AddBroker(url).SetClientID(id + "-sub").SetCleanSession(false).
		SetOrderMatters(true).SetDefaultPublishHandler(func(paho.Client, paho.Message) { got.Add(1) }))
	if tok := sub.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		b.Fatal(tok.Error())
	}
	defer sub.Disconnect(100)
	if tok := sub.Subscribe(topic, 1, nil); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		b.Fatal(tok.Error())
	}
	publishQoS1(b, url, id, topic, func() uint64 { return uint64(got.Load()) })
}

// publishQoS1 publishes b.N 200-byte QoS 1 messages to topic from a fresh
// paho client, polls count until it reaches b.N (5-minute limit) and
// reports the rate from the first publish.
func publishQoS1(b *testing.B, url, id, topic string, count func() uint64) {
	b.Helper()
	pub := paho.NewClient(paho.NewClientOptions().AddBroker(url).SetClientID(id + "-pub"))
	if tok := pub.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		b.Fatal(tok.Error())
	}
	defer pub.Disconnect(100)
	payload := strings.Repeat("x", 200)

	b.ResetTimer()
	start := time.Now()
	for range b.N {
		pub.Publish(topic, 1, false, payload)
	}
	deadline := time.Now().Add(5 * time.Minute)
	for count() < uint64(b.N) {
		if time.Now().After(deadline) {
			b.Fatalf("got %d of %d", count(), b.N)
		}
		time.Sleep(time.Millisecond) // polling interval
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "msg/s")
}
