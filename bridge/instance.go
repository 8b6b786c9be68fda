package bridge

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/gobridge/gobridge/stores"
)

// ErrDuplicateInstance is returned by Run when another live process runs
// with the same bridge.id on the same store.
var ErrDuplicateInstance = errors.New("bridge: another instance with this bridge.id is running")

// claimInstance takes this process's instance lease: one live process per
// bridge.id (DESIGN.md §11.2). A lease held by another process is waited
// for up to one TTL (its holder may have just been killed); when it is
// still renewed after that, another live instance has this bridge.id.
func (b *Bridge) claimInstance(ctx context.Context) (stores.Lease, error) {
	name, ttl := "instance/"+b.cfg.Bridge.ID, b.cfg.Bridge.LeaseTTL.D()
	deadline := time.Now().Add(ttl + ttl/3)
	for {
		le, err := b.store.Acquire(ctx, name, b.owner, ttl, time.Now())
		if err == nil {
			return le, nil
		}
		if !errors.Is(err, stores.ErrLeaseHeld) {
			return le, fmt.Errorf("bridge: take the instance lease: %w", err)
		}
		if time.Now().After(deadline) {
			return le, fmt.Errorf("%w: bridge.id %q is held by %v; give every instance its own bridge.id",
				ErrDuplicateInstance, b.cfg.Bridge.ID, err)
		}
		b.log.Warn("instance lease held by another process; waiting up to one lease TTL for it to lapse",
			"lease", name, "error", err)
		if !sleep(ctx.Done(), ttl/6) {
			return le, ctx.Err()
		}
	}
}

// keepInstance renews the instance lease every TTL/3 until ctx is done,
// then releases it. A lease lost to another process (this one stalled past
// the TTL while a second instance with its bridge.id started) fails the
// bridge with ErrDuplicateInstance: two live instances must not share it.
func (b *Bridge) keepInstance(ctx context.Context, le stores.Lease, fail func(error)) {
	ttl := b.cfg.Bridge.LeaseTTL.D()
	t := time.NewTicker(ttl / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_ = b.store.Release(rctx, le)
			cancel()
			return
		case <-t.C:
		}
		nl, err := b.store.Renew(ctx, le, ttl, time.Now())
		switch {
		case err == nil:
			le = nl
		case errors.Is(err, stores.ErrLeaseLost):
			switch nl, err = b.store.Acquire(ctx, le.Name, b.owner, ttl, time.Now()); {
			case err == nil:
				b.log.Warn("instance lease lapsed before its renewal; taken again")
				le = nl
			case errors.Is(err, stores.ErrLeaseHeld):
				fail(fmt.Errorf("%w: bridge.id %q was taken over (%v) while this process held it; give every instance its own bridge.id",
					ErrDuplicateInstance, b.cfg.Bridge.ID, err))
				return
			default:
				b.log.Warn("take the lapsed instance lease again", "error", err)
			}
		default:
			b.log.Warn("renew the instance lease", "error", err)
		}
	}
}

// ErrOrphans is returned by Run when the outbox holds live records that
// no drainer of the configuration would deliver: of a route it neither has
// nor had (routes[].previous_ids), or in a partition beyond its session's
// partitions.
var ErrOrphans = errors.New("bridge: the outbox holds records this configuration would not deliver")

// errBeyondPartitions marks the orphans of a session's partitions.
var errBeyondPartitions = errors.New("beyond its partitions")

// checkOrphans refuses to start while the outbox holds live records of a
// route that was renamed or removed (DESIGN.md §11.5), or in a partition a
// lower session.partitions dropped, which no drainer would deliver. Dead
// letters are left to `gobridge dlq requeue --to-route`.
func (b *Bridge) checkOrphans(ctx context.Context, sessions map[string]*session) error {
	orphans, err := b.orphans(ctx, sessions, nil)
	if err != nil || len(orphans) == 0 {
		return err
	}
	advice := "; `gobridge outbox stats` lists them"
	if slices.ContainsFunc(orphans, func(err error) bool { return !errors.Is(err, errBeyondPartitions) }) {
		advice = "; if the route was renamed, add its old id to the new route's previous_ids (in the same session), or put the route back" + advice
	}
	return fmt.Errorf("%w: %w%s", ErrOrphans, errors.Join(orphans...), advice)
}

// orphans lists the routes, but for skip, whose live records the outbox
// holds in a session where sessions have no drainer for them, and the
// sessions holding live records in a partition beyond their partitions.
func (b *Bridge) orphans(ctx context.Context, sessions map[string]*session, skip map[string]*route) ([]error, error) {
	all, err := b.store.Stats(ctx)
	if err != nil {
		return nil, fmt.Errorf("bridge: read outbox stats: %w", err)
	}
	var orphans []error
	for _, st := range all {
		if s := sessions[st.Session]; s != nil && st.Partitions > s.partitions {
			orphans = append(orphans, fmt.Errorf("session %s holds records in partition %d, %w (%d): "+
				"set partitions back to what it was (%d or more) until the session's outbox is empty, then change it",
				st.Session, st.Partitions-1, errBeyondPartitions, s.partitions, st.Partitions))
		}
		for route, c := range st.Routes {
			if s := sessions[st.Session]; c.Live == 0 || (s != nil && s.members[route] != nil) || skip[route] != nil {
				continue
			}
			orphans = append(orphans, fmt.Errorf("session %s holds %d records of route %q", st.Session, c.Live, route))
		}
	}
	return orphans, nil
}
