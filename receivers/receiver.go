// Package receivers defines how inbound MQTT messages reach gobridge's
// routes. The backends are receivers/mqtt (a paho client of an existing
// broker) and receivers/listener (an embedded mochi-mqtt broker).
//
// Each message is handed to a Sink together with a done callback. The
// receiver acknowledges the message to its publisher or broker only after
// done was called, and in the order the messages arrived (MQTT 3.1.1 §4.6),
// even when a later message is settled first.
package receivers

import (
	"context"
	"time"
)

// Message is one inbound MQTT message.
type Message struct {
	// Receiver is the id of the receiver it came through.
	Receiver   string
	Topic      string
	Payload    []byte
	QoS        byte
	Retained   bool
	Duplicate  bool
	ReceivedAt time.Time
	// Truncated is set when the payload was larger than the receiver's
	// max_payload_bytes: Payload holds only its first KiB, Size the full
	// size and SHA256 the hex digest of the whole payload. The sink keeps
	// it as a truncated dead letter (reason payload_too_large) and never
	// routes it.
	Truncated bool
	Size      int
	SHA256    string
}

// Sink takes inbound messages. Accept may block to push back on the source
// (a full outbox); it must return promptly when ctx is done. It calls done
// exactly once, from any goroutine, when the message is settled (persisted,
// delivered, filtered or dead-lettered) and may be acknowledged. A message
// whose done is never called is never acknowledged: the broker redelivers it.
type Sink interface {
	Accept(ctx context.Context, m Message, done func())
}

// SinkFunc adapts a function to a Sink.
type SinkFunc func(ctx context.Context, m Message, done func())

// Accept calls f.
func (f SinkFunc) Accept(ctx context.Context, m Message, done func()) { f(ctx, m, done) }

// Status is a receiver's health, for /readyz and metrics.
type Status struct {
	Connected bool
	// Subscribed is true once every subscription was granted.
	Subscribed bool
	// Reason says why the receiver is not ready; empty when it is.
	Reason string
}

// Stats are a receiver's counters since it was created, for metrics. The
// bridge reads them on scrape; receivers stay free of Prometheus.
type Stats struct {
	// Received counts messages handed to the sink.
	Received uint64
	// Acked counts messages acknowledged after their done (QoS 0 messages
	// count when settled).
	Acked uint64
	// Dropped counts QoS 0 messages dropped because the ingest queue was
	// full (mqtt only: QoS 0 has no flow control).
	Dropped uint64
	// Unrouted counts messages accepted by the embedded listener on topics
	// that match none of its subscriptions (mqtt_listener only).
	Unrouted uint64
	// Abandoned counts messages left unacknowledged because the receiver
	// stopped (or lost its connection) before they were settled; the
	// publisher or broker sends them again.
	Abandoned uint64
	// Reconnects counts successful connections after the first (mqtt only).
	Reconnects uint64
	// InFlight is the number of messages received and not yet acknowledged.
	InFlight int
}
