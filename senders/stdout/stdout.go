// Package stdout is a sender that writes each message as one JSON line to a
// writer (standard output in production): a console for trying routes out
// and for debugging.
package stdout

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"time"
	"unicode/utf8"

	"github.com/gobridge/gobridge/message"
	"github.com/gobridge/gobridge/senders"
)

// Sender writes one JSON line per envelope:
//
//	{"id":"…","topic":"a/b","headers":{"k":"v"},"payload":"…","received_at":"2026-…Z"}
//
// The payload is a JSON string when it is valid UTF-8; otherwise it is
// base64 (standard encoding, padded) and the line carries
// "payload_encoding":"base64". Headers are omitted when there are none.
// Writes are serialized, so lines from concurrent Send calls never interleave.
//
// A write runs in a goroutine that holds the Sender's one turn until the
// write returns, so that Send returns with ctx even when the write blocks
// (a pipe nobody reads): the line is then still written whole, before the
// next, once the pipe drains, and the record is sent again (at least once).
// At most one such goroutine outlives its Send; it ends with its write, or
// with the process.
type Sender struct {
	turn chan struct{} // 1 slot: held by the write in progress
	w    io.Writer
}

// New returns a Sender writing to w.
func New(w io.Writer) *Sender { return &Sender{turn: make(chan struct{}, 1), w: w} }

// line is the JSON shape of one message.
type line struct {
	ID              string            `json:"id"`
	Topic           string            `json:"topic"`
	Headers         map[string]string `json:"headers,omitempty"`
	Payload         string            `json:"payload"`
	PayloadEncoding string            `json:"payload_encoding,omitempty"`
	ReceivedAt      time.Time         `json:"received_at"`
}

// BatchSize returns 1: there is nothing to gain from batching a console.
func (s *Sender) BatchSize() int { return 1 }

// Send writes one line per envelope and returns one error per envelope: nil
// when the line was written, a transient error when the write failed (the
// writer may recover: a full disk, a closed pipe being reopened). It stops
// early with ctx's error (transient) for the envelopes not yet written when
// ctx is done.
func (s *Sender) Send(ctx context.Context, envs []*message.Envelope) []error {
	errs := make([]error, len(envs))
	for i, e := range envs {
		if err := ctx.Err(); err != nil {
			errs[i] = err
			continue
		}
		b, err := encode(e)
		if err != nil {
			errs[i] = senders.Permanent(fmt.Errorf("stdout: encode message %s: %w", e.ID, err))
			continue
		}
		if err = s.write(ctx, b); err != nil {
			errs[i] = fmt.Errorf("stdout: write message %s: %w", e.ID, err)
		}
	}
	return errs
}

// write writes b whole, or returns ctx's error when ctx ends first.
func (s *Sender) write(ctx context.Context, b []byte) error {
	select {
	case s.turn <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	done := make(chan error, 1)
	go func() {
		_, err := s.w.Write(b)
		<-s.turn
		done <- err
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func encode(e *message.Envelope) ([]byte, error) {
	l := line{ID: e.ID, Topic: e.Topic, Headers: e.Headers, ReceivedAt: e.ReceivedAt.UTC()}
	if utf8.Valid(e.Payload) {
		l.Payload = string(e.Payload)
	} else {
		l.Payload = base64.StdEncoding.EncodeToString(e.Payload)
		l.PayloadEncoding = "base64"
	}
	b, err := json.Marshal(l)
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}
