// Package message holds what every stage of gobridge passes along: the
// envelope (one message on its way from a receiver to a sender), its
// time-ordered ID, and the per-message templates that fill sender options
// and processor keys from it.
//
// It is a leaf package: receivers, processors, stores, senders and the
// drainer all import it, and it imports none of them.
package message

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"sync"
	"time"
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
	if e.Headers != nil {
		c.Headers = make(map[string]string, len(e.Headers))
		for k, v := range e.Headers {
			c.Headers[k] = v
		}
	}
	return &c
}

var idState struct {
	sync.Mutex
	lastMS  uint64
	counter uint64
}

// NewID returns a new time-ordered unique ID: a UUIDv7 in its canonical text
// form. IDs made by one process sort in creation order, also within one
// millisecond (a 12-bit counter fills the rand_a field, as RFC 9562 §6.2
// method 1 allows).
func NewID() string { return newIDAt(time.Now()) }

func newIDAt(now time.Time) string {
	ms := uint64(now.UnixMilli())
	idState.Lock()
	if ms <= idState.lastMS {
		ms = idState.lastMS
		idState.counter++
		if idState.counter > 0xfff {
			ms++
			idState.counter = 0
		}
	} else {
		idState.counter = 0
	}
	idState.lastMS = ms
	counter := idState.counter
	idState.Unlock()

	var b [16]byte
	binary.BigEndian.PutUint64(b[0:8], ms<<16)
	b[6] = 0x70 | byte(counter>>8)
	b[7] = byte(counter)
	_, _ = rand.Read(b[8:])
	b[8] = 0x80 | (b[8] & 0x3f)

	var s [36]byte
	hex.Encode(s[0:8], b[0:4])
	s[8] = '-'
	hex.Encode(s[9:13], b[4:6])
	s[13] = '-'
	hex.Encode(s[14:18], b[6:8])
	s[18] = '-'
	hex.Encode(s[19:23], b[8:10])
	s[23] = '-'
	hex.Encode(s[24:], b[10:])
	return string(s[:])
}
