// Package message holds what every stage of gobridge passes along: the
// envelope (one message on its way from a receiver to a sender), its
// time-ordered ID, and the per-message templates that fill sender options
// and processor keys from it.
//
// It is a leaf package: it imports no other gobridge package.
package message

import (
	"maps"
	"time"

	"github.com/google/uuid"
)

// Envelope is one message in flight through gobridge.
//
// ID is stable for the life of the message: the outbox stores it, senders
// pass it on (SQS FIFO MessageDeduplicationId, HTTP Idempotency-Key) so that
// targets can deduplicate redeliveries. Payload is owned by the envelope; a
// stage that changes it assigns a new slice rather than writing into it.
type Envelope struct {
	// ID is a time-ordered unique ID (see NewID) unless the idempotency_key
	// processor set it from the message.
	ID string `json:"id"`
	// Topic is the MQTT topic the message arrived on.
	Topic string `json:"topic"`
	// Payload is the message body, as received or as transformed.
	Payload []byte `json:"payload"`
	// Headers are set by the set_headers processor; senders may pass them on.
	Headers map[string]string `json:"headers,omitempty"`
	// QoS is the MQTT quality of service the message arrived with (0..2).
	QoS byte `json:"qos"`
	// ReceivedAt is when gobridge received the message.
	ReceivedAt time.Time `json:"received_at"`
	// Key is the ordering key (empty: no ordering promise).
	Key string `json:"key,omitempty"`
}

// Clone returns a deep copy of e, so that a route may change its copy without
// affecting another route that received the same message.
func (e *Envelope) Clone() *Envelope {
	c := *e
	c.Headers = maps.Clone(e.Headers)
	return &c
}

// NewID returns a new time-ordered unique ID: a UUIDv7 in its canonical text
// form (github.com/google/uuid keeps IDs made by one process in creation
// order, also within one millisecond).
func NewID() string { return uuid.Must(uuid.NewV7()).String() }
