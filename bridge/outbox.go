package bridge

import (
	"context"
	"fmt"
	"time"

	"github.com/gobridge/gobridge/admin"
	"github.com/gobridge/gobridge/routes"
	"github.com/gobridge/gobridge/stores"
)

// Outbox is the running bridge's outbox as the admin API and the CLI use
// it: reads go to the store; a requeue is placed where the route's records
// go now and handed to its drainer at once.
type Outbox Bridge

// Dead implements admin.Outbox.
func (o *Outbox) Dead(ctx context.Context, q stores.DeadQuery) ([]stores.Record, string, error) {
	return o.store.Dead(ctx, q)
}

// Stats implements admin.Outbox.
func (o *Outbox) Stats(ctx context.Context) ([]stores.SessionStats, error) { return o.store.Stats(ctx) }

// Requeue implements admin.Outbox. During a reload it fails at once with
// admin.ErrReloading rather than wait: a reload may take several
// shutdown_timeouts, longer than a client waits.
func (o *Outbox) Requeue(ctx context.Context, id, of, to string) (stores.Record, error) {
	b := (*Bridge)(o)
	if b.reloading.Load() {
		return stores.Record{}, admin.ErrReloading
	}
	b.mu.Lock() // not during a reload: it would place r by the configuration going away; one requeue waits for another
	defer b.mu.Unlock()
	r, err := stores.Requeue(ctx, b.store, id, of, to, Placer(b.cur.Load().cfg), time.Now())
	if err != nil {
		return r, err
	}
	if s := b.cur.Load().sessions[r.Session]; s != nil {
		s.group.Delivered(&r, -1) // the store holds work for its partition (Reserve not asked)
	}
	b.limits.refresh(ctx, true)
	return r, nil
}

// Drop implements admin.Outbox.
func (o *Outbox) Drop(ctx context.Context, id, of string) error {
	b := (*Bridge)(o)
	err := stores.DropDead(ctx, b.store, id, of)
	if err == nil {
		b.limits.refresh(ctx, true)
	}
	return err
}

// Placer says where each route of cfg keeps its records (see home). It
// fails for a route cfg lacks.
func Placer(cfg *routes.Config) stores.Placer {
	return func(route string) (string, int, error) {
		for _, r := range cfg.Routes {
			if r.ID == route {
				session, partitions := home(r)
				return session, partitions, nil
			}
		}
		return "", 0, fmt.Errorf("route %q is not in the configuration (requeue it under its new route id)", route)
	}
}
