package bridge

import (
	"context"
	"sync"

	"github.com/gobridge/gobridge/message"
	"github.com/gobridge/gobridge/receivers"
	"github.com/gobridge/gobridge/senders"
)

// fallback delivers a direct_or_outbox route's messages (DESIGN.md §11.6,
// the seeds' tell_reliable): a direct send first, bounded by
// policy.direct_timeout; when the target accepts, the source is
// acknowledged with no store write. When the direct send fails or times
// out, or while the sender is down (its Health: the drainer probes it
// then), the message is appended to the route's outbox session and
// acknowledged once durable; the drainer delivers it like any outbox
// record. A permanent failure follows on_permanent_failure instead.
//
// Order: messages of one ordering key go one at a time, in arrival order,
// and once a key has records in the outbox its later messages go there too,
// until the session's outbox is empty again, so the drainer delivers them
// in order behind the earlier ones. A new process does not know the keys of
// the records an earlier one left: every key goes to the outbox until it
// is empty.
type fallback struct {
	b     *Bridge
	r     *route
	lanes lanes // no in-flight gauge: the route's drainer reports it

	mu      sync.Mutex
	sticky  map[string]bool // ordering keys with records in the outbox
	pending int             // fallbacks not yet counted in the session's live records
	// unknown: the outbox may hold records of any key (left by an earlier
	// process), so every key is held until the session's outbox is empty.
	unknown bool
}

// submit starts the delivery of env (see lanes.start); settle is called
// once it is delivered, durable in the outbox, or settled by policy.
func (f *fallback) submit(ctx context.Context, env *message.Envelope, received message.Envelope, coalesceKey string, settle settleFunc) bool {
	return f.lanes.start(ctx, f.r, env.Key, func() {
		if f.direct(env, received, settle) {
			return
		}
		f.b.metrics.fallback.WithLabelValues(f.r.id).Inc()
		f.mark(env.Key, 1)
		defer f.mark("", -1) // admitted (counted live) or given up by now
		// At shutdown persist gives up: the message is left unacknowledged.
		f.b.persist(ctx, f.r.record(env, coalesceKey), settle)
	})
}

// direct tries the direct send and reports whether it settled the message
// (delivered, or settled by on_permanent_failure); false means: fall back.
func (f *fallback) direct(env *message.Envelope, received message.Envelope, settle settleFunc) bool {
	b, r := f.b, f.r
	if f.held(env.Key) || !r.health.Up() {
		return false
	}
	class, _, err := b.sendDirect(r, env, r.cfg.Policy.DirectTimeout.D())
	switch class {
	case senders.OK:
		b.metrics.direct.WithLabelValues(r.id).Inc()
		settle(receivers.OutcomeDelivered)
		return true
	case senders.Fatal:
		received.ID = env.ID
		if !b.failAtIngest(r.ctx, r, received, err.Error(), false, settle) {
			b.log.Warn("shutdown: message left unacknowledged for redelivery", "route", r.id, "record_id", env.ID)
		}
		return true
	}
	b.log.Debug("direct send failed; the message goes to the outbox", "route", r.id, "record_id", env.ID, "error", err)
	return false
}

// held reports whether key may have records in the outbox; once the
// session's outbox is empty, no key has.
func (f *fallback) held(key string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if (f.unknown || len(f.sticky) > 0) && f.pending == 0 && f.b.limits.live(f.r.session) == 0 {
		clear(f.sticky)
		f.unknown = false
	}
	return key != "" && (f.unknown || f.sticky[key])
}

// mark notes that a fallback of key starts (n = 1: key has a record in
// the outbox from now on) or has been admitted to the outbox (n = -1).
func (f *fallback) mark(key string, n int) {
	f.mu.Lock()
	f.pending += n
	if key != "" {
		f.sticky[key] = true
	}
	f.mu.Unlock()
}
