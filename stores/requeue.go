package stores

import (
	"context"
	"fmt"
	"time"
)

// Placer says where a route's records go now: the session that keeps its
// records (or its ingest dead letters) and that session's partition count.
// It fails for a route the configuration does not know.
type Placer func(route string) (session string, partitions int, err error)

// Requeue puts dead letter id back into the outbox, in one Write: the
// record Requeued makes (placed by place, under route when route is not
// empty — a route renamed since the record died — else its own) and the
// Drop of the dead letter. It returns the new record. ErrNotFound when
// there is no such dead letter; ErrInvalid when it cannot be requeued.
func Requeue(ctx context.Context, s Store, id, route string, place Placer, now time.Time) (Record, error) {
	dead, _, err := s.Dead(ctx, DeadQuery{ID: id})
	if err != nil {
		return Record{}, err
	}
	d := dead[0]
	if route != "" {
		d.Route = route
	}
	session, partitions, err := place(d.Route)
	if err != nil {
		return Record{}, fmt.Errorf("%w: requeue %s: %v", ErrInvalid, id, err)
	}
	r, err := Requeued(d, session, partitions, now)
	if err != nil {
		return Record{}, err
	}
	b := Batch{Append: []Record{r}, Settle: []Settlement{{Key: dead[0].Key(), Outcome: Drop}}}
	if err := s.Write(ctx, &b); err != nil {
		return Record{}, fmt.Errorf("requeue %s: %w", id, err)
	}
	if b.Settle[0].Stale {
		return Record{}, fmt.Errorf("%w: dead letter %s was requeued or dropped meanwhile", ErrNotFound, id)
	}
	return b.Append[0], nil
}

// DropDead deletes dead letter id. ErrNotFound when there is none.
func DropDead(ctx context.Context, s Store, id string) error {
	dead, _, err := s.Dead(ctx, DeadQuery{ID: id})
	if err != nil {
		return err
	}
	b := Batch{Settle: []Settlement{{Key: dead[0].Key(), Outcome: Drop}}}
	if err := s.Write(ctx, &b); err != nil {
		return fmt.Errorf("drop %s: %w", id, err)
	}
	if b.Settle[0].Stale {
		return fmt.Errorf("%w: dead letter %s was requeued or dropped meanwhile", ErrNotFound, id)
	}
	return nil
}
