// Package storetest holds the conformance suites every stores backend must
// pass: Run (and RunWith) for stores.Store, RunLeases (and RunLeasesWith) for
// stores.Leases. The suites take time only from the records and requests
// they build (no sleeps, no wall clock), use small volumes so that slow
// emulators stay fast, and name every session and route uniquely per test so
// that backends sharing one table across tests do not see each other's data.
package storetest

import (
	"crypto/rand"
	"encoding/hex"
	"slices"
	"testing"
	"time"

	"github.com/gobridge/gobridge/message"
	"github.com/gobridge/gobridge/stores"
)

// Features describes what a backend can do beyond the common contract, so
// that the suites test capabilities rather than backend names.
type Features struct {
	// ForgetsDone is set by backends that do not remember completed (or
	// coalesced-away, or dropped) records: re-appending one of those
	// appends it again instead of being a no-op.
	ForgetsDone bool
	// Reopen closes s and opens the same durable store again. Nil for
	// backends whose data does not outlive the value (memory).
	Reopen func(t *testing.T, s stores.Store) stores.Store
	// ReopenLeases is Reopen for lease tables.
	ReopenLeases func(t *testing.T, l stores.Leases) stores.Leases
}

// Run runs the outbox and dead-letter suite against fresh stores made by
// newStore, assuming no optional features.
func Run(t *testing.T, newStore func(t *testing.T) stores.Store) {
	RunWith(t, Features{}, newStore)
}

// RunWith runs the outbox and dead-letter suite with the given features.
func RunWith(t *testing.T, f Features, newStore func(t *testing.T) stores.Store) {
	t.Helper()
	s := suite{f: f, newStore: newStore}
	t.Run("Append", s.append)
	t.Run("Claim", s.claim)
	t.Run("Ordering", s.ordering)
	t.Run("Settle", s.settle)
	t.Run("DeadLetters", s.deadLetters)
	t.Run("AppendDead", s.appendDead)
	t.Run("Coalesce", s.coalesce)
	t.Run("Stats", s.stats)
	t.Run("Concurrency", s.concurrency)
	t.Run("Inspect", s.inspect)
	if f.Reopen != nil {
		t.Run("Reopen", s.reopen)
	}
}

type suite struct {
	f        Features
	newStore func(t *testing.T) stores.Store
}

// t0 is the suites' epoch; every time they use is t0 plus whole
// milliseconds, so that backends storing milliseconds compare equal.
var t0 = time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)

func at(d time.Duration) time.Time { return t0.Add(d) }

// fixture is one test's store with a session and route of its own.
type fixture struct {
	t       *testing.T
	s       stores.Store
	f       Features
	session string
	route   string
}

func (s suite) setup(t *testing.T) *fixture {
	t.Helper()
	t.Parallel()
	st := s.newStore(t)
	u := unique()
	return &fixture{t: t, s: st, f: s.f, session: "sess-" + u, route: "route-" + u}
}

func unique() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// rec returns a new record of the fixture's session and route, due, created
// and received at t0, with a fresh envelope ID.
func (fx *fixture) rec() stores.Record {
	id := message.NewID()
	return stores.Record{
		Session: fx.session,
		Route:   fx.route,
		Envelope: message.Envelope{
			ID:         id,
			Topic:      "factory/1/telemetry",
			Payload:    []byte(`{"id":"` + id + `"}`),
			QoS:        1,
			ReceivedAt: t0,
		},
		CreatedAt:     t0,
		NextAttemptAt: t0,
	}
}

func (fx *fixture) recs(n int) []stores.Record {
	out := make([]stores.Record, n)
	for i := range out {
		out[i] = fx.rec()
	}
	return out
}

func (fx *fixture) append(recs ...stores.Record) {
	fx.t.Helper()
	if err := fx.s.Append(fx.t.Context(), recs...); err != nil {
		fx.t.Fatalf("Append: %v", err)
	}
}

// claimAt claims up to limit records of partition 0 with token at now, with
// a claim deadline 30s later.
func (fx *fixture) claimAt(token int64, limit int, now time.Time) []stores.Record {
	fx.t.Helper()
	return fx.claimPart(0, token, limit, now)
}

func (fx *fixture) claimPart(part int, token int64, limit int, now time.Time) []stores.Record {
	fx.t.Helper()
	got, err := fx.s.Claim(fx.t.Context(), stores.ClaimRequest{
		Session: fx.session, Partition: part, Token: token, Limit: limit,
		Now: now, Until: now.Add(30 * time.Second),
	})
	if err != nil {
		fx.t.Fatalf("Claim: %v", err)
	}
	return got
}

// drain claims everything claimable far in the future with a token of its
// own and returns the envelope IDs in claim order.
func (fx *fixture) drain() []string {
	fx.t.Helper()
	return ids(fx.claimAt(1<<40, 1000, at(1000*time.Hour)))
}

func (fx *fixture) complete(recs ...stores.Record) {
	fx.t.Helper()
	if err := fx.s.Complete(fx.t.Context(), recs...); err != nil {
		fx.t.Fatalf("Complete: %v", err)
	}
}

func (fx *fixture) stats() stores.SessionStats {
	fx.t.Helper()
	st, err := fx.s.Stats(fx.t.Context(), fx.session)
	if err != nil {
		fx.t.Fatalf("Stats: %v", err)
	}
	return st
}

func ids(recs []stores.Record) []string {
	out := make([]string, len(recs))
	for i := range recs {
		out[i] = recs[i].Envelope.ID
	}
	return out
}

func wantIDs(t *testing.T, what string, got []string, want ...string) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Fatalf("%s: got IDs %v, want %v", what, got, want)
	}
}

func wantTime(t *testing.T, what string, got, want time.Time) {
	t.Helper()
	if !got.Equal(want) {
		t.Errorf("%s = %v, want %v", what, got, want)
	}
}
