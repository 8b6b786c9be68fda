// Package receivers defines how inbound messages reach gobridge's routes.
// A receiver hands each message to a Sink with a done callback, and
// acknowledges it to its publisher or broker only after done was called, in
// arrival order (MQTT 3.1.1 §4.6), even when a later message is settled
// first. receivers/mqtt (a paho client of a broker) and receivers/listener
// (an embedded mochi-mqtt broker) do so through this package's Acker and
// pass the conformance suite in receivers/receivertest;
// receivers/httplistener (HTTP ingest) answers each request once its message
// is settled (Message.Report).
package receivers

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"time"
)

// Defaults of the limits every receiver type takes.
const (
	// DefaultMaxPayloadBytes is the largest payload routed as it is; a
	// larger one reaches the sink truncated.
	DefaultMaxPayloadBytes = 256 << 10
	// DefaultMaxInflightBytes bounds the payload bytes a receiver holds
	// unacknowledged.
	DefaultMaxInflightBytes = 64 << 20
	// TruncatedBytes is how much of an oversized payload a truncated
	// message keeps.
	TruncatedBytes = 1024
)

// Rejection reasons, as counted in Stats and labelled in
// gobridge_ingest_rejected_total{reason}.
const (
	ReasonPayloadTooLarge = "payload_too_large"
	ReasonDenied          = "denied"
	ReasonMalformed       = "malformed"
	ReasonBusy            = "busy"
)

// Message is one inbound message.
type Message struct {
	Receiver   string // the id of the receiver it came through
	Topic      string
	Payload    []byte
	QoS        byte
	Retained   bool
	Duplicate  bool
	ReceivedAt time.Time
	Size       int // of the whole payload in bytes, also when Truncated
	// Truncated is set when the payload was over max_payload_bytes (see
	// Limit). The sink must settle such a message as a dead letter with
	// reason ReasonPayloadTooLarge (or drop and count it where there is
	// nowhere to keep one), never route it.
	Truncated bool
	SHA256    string // hex SHA-256 of the whole payload, when Truncated
	// ID, when set, is the envelope ID (HTTP ingest: from the producer's
	// idempotency key); empty: each route makes a fresh one.
	ID      string
	Headers map[string]string // carried into the envelope (HTTP ingest)
	// Report, when set, is called once, just before done, with how the
	// message was settled: for receivers that answer their producer.
	Report func(Settled)
}

// Settled says how the bridge settled a message: the envelope ID of its
// first matched route and the outcome there.
type Settled struct {
	ID string
	// Outcome is one of the Outcome* constants.
	Outcome string
}

// Outcomes of a settled message, as Settled reports them.
const (
	OutcomeCommitted    = "committed"     // durable in the outbox
	OutcomeDelivered    = "delivered"     // the target accepted it
	OutcomeFiltered     = "filtered"      // a filter processor dropped it
	OutcomeDeadLettered = "dead_lettered" // kept as a dead letter
	OutcomeDropped      = "dropped"       // dropped by policy (no outbox store)
	OutcomeUnrouted     = "unrouted"      // no route matched
)

// Limit truncates m when its payload is larger than max bytes and reports
// whether it did: Payload then holds a copy of its first TruncatedBytes (so
// the large payload can be freed) and SHA256 identifies the whole. It sets
// Size either way.
func (m *Message) Limit(max int) bool {
	m.Size = len(m.Payload)
	if m.Size <= max {
		return false
	}
	sum := sha256.Sum256(m.Payload)
	m.SHA256 = hex.EncodeToString(sum[:])
	m.Payload = append([]byte(nil), m.Payload[:min(TruncatedBytes, m.Size)]...)
	m.Truncated = true
	return true
}

// Sink takes inbound messages. Accept may block to push back on the source
// (a full outbox); it must return promptly when ctx is done. It calls done
// exactly once, from any goroutine, when the message is settled (persisted,
// delivered, filtered or dead-lettered) and may be acknowledged. A message
// whose done is never called is never acknowledged: the broker redelivers it.
type Sink interface {
	Accept(ctx context.Context, m Message, done func())
}

// Status is a receiver's health, for /readyz and metrics.
type Status struct {
	Connected bool
	// Subscribed is true once every subscription was granted with the QoS
	// it needs (a QoS 1/2 subscription granted QoS 0 is not).
	Subscribed bool
	// Reason says why the receiver is not ready; empty when it is.
	Reason string
}

// Stats are a receiver's counters since it was created, which the bridge
// reads for metrics on scrape.
type Stats struct {
	Received uint64 // messages handed to the sink
	// Acked counts messages acknowledged after their done (QoS 0 messages
	// count when settled).
	Acked uint64
	// Dropped counts QoS 0 messages dropped because the receiver's
	// in-flight bound was reached (mqtt only: QoS 0 has no flow control
	// there; the listener holds the publisher back instead).
	Dropped uint64
	// Unrouted counts messages accepted by the embedded listener on topics
	// that match none of its subscriptions (mqtt_listener only).
	Unrouted uint64
	// Abandoned counts messages left unacknowledged because the receiver
	// stopped (or lost its connection) before they were settled; the
	// publisher or broker sends them again.
	Abandoned  uint64
	Reconnects uint64 // successful connections after the first (mqtt only)
	// TooLarge counts payloads over max_payload_bytes, handed to the sink
	// truncated (reason payload_too_large); http_listener: refused with 413.
	TooLarge uint64
	// Denied counts publications the listener's ACL refused: acknowledged
	// and discarded (reason denied; mqtt_listener); http_listener: requests
	// refused with 401 or 403.
	Denied uint64
	// Malformed counts requests (or batch lines) refused as malformed
	// (http_listener only: 400, 415).
	Malformed uint64
	// Busy counts requests refused with 503 before their message was
	// handed on: max_in_flight requests open, or no room within
	// max_inflight_bytes in time (http_listener only).
	Busy          uint64
	InFlight      int   // messages received and not yet acknowledged
	InFlightBytes int64 // their payload bytes
}
