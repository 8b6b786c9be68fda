// Package senders holds what every sender backend (senders/sqs,
// senders/http, senders/stdout) shares with the parts that call them: the
// typed errors that say whether a failed delivery may be retried, and the
// one place where they are told apart (Classify).
package senders

import (
	"errors"
	"fmt"
	"time"
)

// CapacityError reports that the target is saturated (HTTP 429/503, SQS
// throttling). The drainer halves its concurrency limit and retries the record
// no sooner than RetryAfter (when set) or its backoff, whichever is later.
type CapacityError struct {
	// RetryAfter is the target's hint; zero means none was given.
	RetryAfter time.Duration
	Err        error
}

func (e *CapacityError) Error() string {
	if e.RetryAfter > 0 {
		return fmt.Sprintf("capacity (retry after %s): %v", e.RetryAfter, e.Err)
	}
	return fmt.Sprintf("capacity: %v", e.Err)
}

func (e *CapacityError) Unwrap() error { return e.Err }

// PermanentError reports that retrying cannot help (HTTP 4xx other than
// 408/429, payload too large, bad credentials, a processor that cannot handle
// the message). The record follows on_permanent_failure at once.
type PermanentError struct{ Err error }

func (e *PermanentError) Error() string { return fmt.Sprintf("permanent: %v", e.Err) }

func (e *PermanentError) Unwrap() error { return e.Err }

// ErrHeld marks a message that a sender did not send, so that it does not
// overtake an earlier one that failed (an SQS FIFO group). Wrapped in a
// *CapacityError it is retried with no attempt counted; it says nothing
// about the target, so Health does not count it as a failure and the
// drainer does not halve its concurrency for it.
var ErrHeld = errors.New("held behind an earlier message that failed")

// Capacity wraps err as a *CapacityError with the target's retry-after hint
// (zero for none).
func Capacity(err error, retryAfter time.Duration) error {
	return &CapacityError{RetryAfter: retryAfter, Err: err}
}

// Permanent wraps err as a *PermanentError.
func Permanent(err error) error { return &PermanentError{Err: err} }

// Class is how a delivery outcome is handled.
type Class int

const (
	// OK: the target accepted the message.
	OK Class = iota
	// Transient: retry with backoff; any error that is not typed.
	Transient
	// Saturated: the target asked us to slow down (a *CapacityError).
	Saturated
	// Fatal: retrying cannot help (a *PermanentError).
	Fatal
)

// String returns the class as used in metric labels and the journal.
func (c Class) String() string {
	switch c {
	case OK:
		return "ok"
	case Transient:
		return "transient"
	case Saturated:
		return "capacity"
	case Fatal:
		return "permanent"
	}
	return "unknown"
}

// Classify sorts a send result into its Class, and returns the retry-after
// hint of a capacity error. It is the one place where the typed errors above
// are told apart.
func Classify(err error) (Class, time.Duration) {
	if err == nil {
		return OK, 0
	}
	if ce, ok := errors.AsType[*CapacityError](err); ok {
		return Saturated, ce.RetryAfter
	}
	if _, ok := errors.AsType[*PermanentError](err); ok {
		return Fatal, 0
	}
	return Transient, 0
}
