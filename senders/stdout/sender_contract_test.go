package stdout

import (
	"context"

	"github.com/gobridge/gobridge/message"
)

// sender is the method set the drainer and the direct_hold path declare on
// their side; the guard keeps this sender in step with it.
type sender interface {
	BatchSize() int
	Send(ctx context.Context, envs []*message.Envelope) []error
}

var _ sender = (*Sender)(nil)
