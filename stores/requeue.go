package stores

import (
	"time"

	"github.com/gobridge/gobridge/message"
)

// Requeued returns the pending record that requeueing dead letter d at now
// makes, before the store stamps Seq: a new envelope ID, CausationID d's ID,
// attempts and claim cleared, due and created at now, with the same time left
// to live, and no coalesce key. Backends share it so that they agree.
func Requeued(d Record, now time.Time) Record {
	r := d
	r.Envelope.ID = message.NewID()
	r.CoalesceKey = "" // an operator's requeue replaces nothing and is never absorbed
	r.CausationID = d.Envelope.ID
	r.State = Pending
	r.Attempts = 0
	r.FirstAttemptAt = time.Time{}
	r.NextAttemptAt = now
	r.LastError = ""
	r.CreatedAt = now
	if !d.ExpiresAt.IsZero() {
		r.ExpiresAt = d.ExpiresAt.Add(now.Sub(d.CreatedAt))
	}
	r.Token, r.ClaimUntil = 0, time.Time{}
	r.DeadAt, r.DeadReason = time.Time{}, ""
	return r
}
