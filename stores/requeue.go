package stores

import (
	"cmp"
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
	d, err := deadLetter(ctx, s, id)
	if err != nil {
		return Record{}, err
	}
	orig := d
	d.Route = cmp.Or(route, d.Route)
	session, partitions, err := place(d.Route)
	if err != nil {
		return Record{}, fmt.Errorf("%w: requeue %s: %v", ErrInvalid, id, err)
	}
	r, err := Requeued(d, session, partitions, now)
	if err != nil {
		return Record{}, err
	}
	b, err := dropDead(ctx, s, "requeue", orig, r)
	if err != nil {
		return Record{}, err
	}
	return b.Append[0], nil
}

// DropDead deletes dead letter id. ErrNotFound when there is none.
func DropDead(ctx context.Context, s Store, id string) error {
	d, err := deadLetter(ctx, s, id)
	if err == nil {
		_, err = dropDead(ctx, s, "drop", d)
	}
	return err
}

// deadLetter reads dead letter id; ErrNotFound when there is none. An
// empty id names none (as a query, it would list every dead letter).
func deadLetter(ctx context.Context, s Store, id string) (Record, error) {
	if id == "" {
		return Record{}, fmt.Errorf("%w: a dead letter's ID is required", ErrNotFound)
	}
	dead, _, err := s.Dead(ctx, DeadQuery{ID: id})
	if err != nil {
		return Record{}, err
	}
	return dead[0], nil
}

// dropDead writes the Drop of dead letter d with the appends rs in one
// batch, which it returns; verb names the action in errors.
func dropDead(ctx context.Context, s Store, verb string, d Record, rs ...Record) (*Batch, error) {
	b := &Batch{Append: rs, Settle: []Settlement{{Key: d.Key(), Outcome: Drop}}}
	if err := s.Write(ctx, b); err != nil {
		return nil, fmt.Errorf("%s %s: %w", verb, d.Envelope.ID, err)
	}
	if b.Settle[0].Stale {
		return nil, fmt.Errorf("%w: dead letter %s was requeued or dropped meanwhile", ErrNotFound, d.Envelope.ID)
	}
	return b, nil
}
