package bridge

import (
	"context"
	"sync"

	"github.com/gobridge/gobridge/message"
	"github.com/gobridge/gobridge/receivers"
	"github.com/gobridge/gobridge/senders"
	"github.com/gobridge/gobridge/stores"
)

// fallback delivers a direct_or_outbox route's messages (DESIGN.md §11.6):
// a direct send first, bounded by policy.direct_timeout, acknowledged with
// no store write when the target accepts. When it fails or times out, or
// while the sender is down (the drainer probes it then), the message goes
// to the outbox and is acknowledged once durable. A permanent failure
// follows on_permanent_failure instead.
//
// Order: messages of one ordering key go one at a time, and once a key has
// records in the outbox its later messages go there too, behind them. A key
// is forgotten once the drainer settled the newest record of it that this
// route wrote (it sends a key's records in order, so the earlier ones were
// settled before), or when the session's outbox is empty: memory is bounded
// by the keys in the outbox. A new process does not know the keys an
// earlier one left: every key goes to the outbox until it is empty.
type fallback struct {
	b     *Bridge
	r     *route
	lanes lanes // no in-flight gauge: the route's drainer reports it

	mu      sync.Mutex
	sticky  map[string]stickyKey // ordering keys with records in the outbox
	newest  map[string]string    // the IDs of sticky's newest records -> their keys
	pending int                  // fallbacks not yet counted in the session's live records
	unknown bool                 // the outbox may hold any key (left by an earlier process)
}

// stickyKey is what the outbox holds of one ordering key.
type stickyKey struct {
	writing int    // its fallbacks that the store has not answered yet
	newest  string // ID of its newest record the store inserted; "": settled
}

func newFallback(b *Bridge, r *route) *fallback {
	return &fallback{b: b, r: r, lanes: newLanes(r, nil), sticky: map[string]stickyKey{}, newest: map[string]string{}, unknown: true}
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
		defer f.mark("", -1) // admitted (counted live) or given up (at shutdown) by now
		f.b.persist(ctx, f.r.record(env, coalesceKey), settle, func(inserted bool) {
			f.written(env.Key, env.ID, inserted)
		})
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
		clear(f.newest)
		f.unknown = false
	}
	if key == "" {
		return false
	}
	_, ok := f.sticky[key]
	return f.unknown || ok
}

// mark notes that a fallback of key starts (n = 1) or was admitted (n = -1).
func (f *fallback) mark(key string, n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pending += n
	if key != "" {
		k := f.sticky[key]
		k.writing++
		f.sticky[key] = k
	}
}

// written notes the store's answer to a fallback of key: when inserted, id
// is the key's newest record in the outbox.
func (f *fallback) written(key, id string, inserted bool) {
	if key == "" {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	k, ok := f.sticky[key]
	if !ok { // forgotten meanwhile: the outbox emptied
		return
	}
	k.writing--
	if inserted {
		delete(f.newest, k.newest)
		k.newest, f.newest[id] = id, key
	}
	f.forget(key, k)
}

// drained notes that the drainer settled record id for good: when it is
// its key's newest, the key's messages may go direct again.
func (f *fallback) drained(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	key, ok := f.newest[id]
	if !ok {
		return
	}
	delete(f.newest, id)
	k := f.sticky[key]
	k.newest = ""
	f.forget(key, k)
}

// forget stores k as key's state, or forgets key when nothing of it is in
// or on its way to the outbox. Called holding mu.
func (f *fallback) forget(key string, k stickyKey) {
	if k.writing == 0 && k.newest == "" {
		delete(f.sticky, key)
		return
	}
	f.sticky[key] = k
}

// drained tells the direct_or_outbox routes which of their records the
// drainers settled in a written batch. A record replaced by coalescing says
// nothing about the records of its key before it.
func (b *Bridge) drained(ss []stores.Settlement) {
	p := b.cur.Load()
	var r *route
	for _, s := range ss {
		if s.Stale || s.Outcome != stores.Done && s.Outcome != stores.DeadLetter || s.Reason == "coalesced" {
			continue
		}
		if r == nil || r.id != s.Route {
			r = p.route(s.Route)
		}
		if r != nil && r.fallback != nil && r.session == s.Session {
			r.fallback.drained(s.ID)
		}
	}
}
