package stores

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Placer says where a route's records go now: the session that keeps its
// records (or its ingest dead letters) and that session's partition count.
// It fails for a route the configuration does not know.
type Placer func(route string) (session string, partitions int, err error)

// Requeue puts the dead letter of route of with envelope ID id (see
// FindDead) back into the outbox, in one Write: the record Requeued
// makes (placed by place, under route to when it is not empty — a route
// renamed since the record died — else its own) and the Drop of the dead
// letter. It returns the new record. ErrNotFound when there is no such
// dead letter; ErrInvalid when it cannot be requeued.
func Requeue(ctx context.Context, s Store, id, of, to string, place Placer, now time.Time) (Record, error) {
	d, err := FindDead(ctx, s, id, of)
	if err != nil {
		return Record{}, err
	}
	orig := d
	d.Route = cmp.Or(to, d.Route)
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

// DropDead deletes the dead letter of route of with envelope ID id (see
// FindDead). ErrNotFound when there is none.
func DropDead(ctx context.Context, s Store, id, of string) error {
	d, err := FindDead(ctx, s, id, of)
	if err == nil {
		_, err = dropDead(ctx, s, "drop", d)
	}
	return err
}

// FindDead reads the dead letter of route of (any route when of is
// empty) with envelope ID id. One message that two routes dead-lettered
// leaves a letter on each, with the same ID: without of, that is
// ErrInvalid, naming the routes. ErrNotFound when there is none; an empty
// id names none (as a query, it would list every dead letter).
func FindDead(ctx context.Context, s interface {
	Dead(context.Context, DeadQuery) ([]Record, string, error)
}, id, of string) (Record, error) {
	if id == "" {
		return Record{}, fmt.Errorf("%w: a dead letter's ID is required", ErrNotFound)
	}
	dead, _, err := s.Dead(ctx, DeadQuery{ID: id})
	if err != nil {
		return Record{}, err
	}
	dead = slices.DeleteFunc(dead, func(d Record) bool { return of != "" && d.Route != of })
	routes := make([]string, 0, len(dead))
	for _, d := range dead {
		if !slices.Contains(routes, d.Route) {
			routes = append(routes, d.Route)
		}
	}
	switch {
	case len(dead) == 0:
		return Record{}, fmt.Errorf("%w: no dead letter %s of route %s", ErrNotFound, id, of)
	case len(routes) > 1:
		return Record{}, fmt.Errorf("%w: dead letters of routes %s carry ID %s (one message, dead-lettered by each): name the route",
			ErrInvalid, strings.Join(routes, ", "), id)
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
