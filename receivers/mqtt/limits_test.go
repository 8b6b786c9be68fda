package mqtt

// What the receiver holds against the limits of DESIGN.md §11.1: payloads
// over max_payload_bytes, and topics counted against max_inflight_bytes.

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"

	"github.com/gobridge/gobridge/internal/testservices"
	"github.com/gobridge/gobridge/receivers/internal/testsink"
)

// TestReceiver_OversizedFromMosquitto: a payload over max_payload_bytes
// (Mosquitto's own message_size_limit is unset) reaches the sink truncated
// and is acknowledged once settled, so the broker does not send it again.
func TestReceiver_OversizedFromMosquitto(t *testing.T) {
	t.Parallel()
	url := testservices.MQTTURL(t)
	id := unique(t)
	topic := "gbtest/" + id + "/big"
	sink := testsink.New(true)
	r := newReceiver(t, config(url, id, topic), sink) // default max_payload_bytes: 262144
	run(t, r)
	waitSubscribed(t, r)
	big := strings.Repeat("0123456789", 30_000)
	publish(t, url, topic, big, "small")
	sum := sha256.Sum256([]byte(big))
	if d := sink.Next(t); !d.Msg.Truncated || d.Msg.Size != len(big) || d.Msg.SHA256 != hex.EncodeToString(sum[:]) ||
		string(d.Msg.Payload) != big[:1024] {
		t.Fatalf("got truncated=%v size=%d sha256=%s, %d payload bytes", d.Msg.Truncated, d.Msg.Size, d.Msg.SHA256, len(d.Msg.Payload))
	}
	if d := sink.Next(t); string(d.Msg.Payload) != "small" || d.Msg.Truncated {
		t.Fatalf("then got %+v", d.Msg)
	}
	testsink.Eventually(t, "both acknowledged", func() bool { return r.Stats().Acked == 2 })
	if s := r.Stats(); s.TooLarge != 1 {
		t.Fatalf("stats = %+v", s)
	}
}

// TestReceiver_LongTopicsCountAgainstMaxInflightBytes: paho holds each
// message, topic included, until its acknowledgement, so messages with 16
// KiB topics and 1-byte payloads must fill max_inflight_bytes (64 KiB)
// after 3, not after 2048.
func TestReceiver_LongTopicsCountAgainstMaxInflightBytes(t *testing.T) {
	t.Parallel()
	url := testservices.MQTTURL(t)
	id := unique(t)
	topic := "gbtest/" + id + "/" + strings.Repeat("t", 16<<10)
	sink := testsink.New(false)
	o := config(url, id, "gbtest/"+id+"/+")
	o.CleanSession, o.MaxInflightBytes = true, 64<<10
	r := newReceiver(t, o, sink)
	run(t, r)
	waitSubscribed(t, r)
	const n = 8
	payloads := make([]string, n)
	for i := range payloads {
		payloads[i] = fmt.Sprint(i)
	}
	publish(t, url, topic, payloads...)
	held := make([]testsink.Delivery, 0, n)
	for range 3 { // 3 x (topic + 1 byte) fit in 64 KiB; a 4th does not
		held = append(held, sink.Next(t))
	}
	if s := r.Stats(); s.InFlightBytes < int64(3*(len(topic)+1)) {
		t.Fatalf("3 messages of %d topic bytes held, in-flight bytes %d (stats %+v)", len(topic), s.InFlightBytes, s)
	}
	for len(held) < n { // nothing is lost: settling lets the rest in
		held[len(held)-3].Done()
		held = append(held, sink.Next(t))
	}
	for _, d := range held[n-3:] {
		d.Done()
	}
	testsink.Eventually(t, "all acknowledged", func() bool { return r.Stats().Acked == n })
	for i, d := range held {
		if string(d.Msg.Payload) != payloads[i] {
			t.Fatalf("message %d is %q", i, d.Msg.Payload)
		}
	}
}
