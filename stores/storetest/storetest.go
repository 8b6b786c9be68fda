// Package storetest is the conformance suite every stores backend must pass
// (Run). It takes time only from the records and requests it builds (no
// sleeps), uses small volumes so that emulators stay fast, and names every
// session and route uniquely per test so that backends sharing one table
// across tests do not see each other's data.
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

// Features describes what a backend does beyond the common contract, so
// that the suite tests capabilities rather than backend names.
type Features struct {
	// Reopen closes s and opens the same durable store again. Nil for
	// backends whose data does not outlive the value (memory).
	Reopen func(t *testing.T, s stores.Store) stores.Store
	// ReopenReleasesLeases is set by backends that own their file
	// exclusively (SQLite): opening it ends every lease of the process
	// that had it before, so that its successor owns the partitions at
	// once.
	ReopenReleasesLeases bool
}

// Run runs the whole suite against fresh stores made by newStore.
func Run(t *testing.T, f Features, newStore func(t *testing.T) stores.Store) {
	t.Helper()
	s := suite{f: f, newStore: newStore}
	t.Run("Append", s.append)
	t.Run("Settle", s.settle)
	t.Run("Claim", s.claim)
	t.Run("Coalesce", s.coalesce)
	t.Run("DeadLetters", s.deadLetters)
	t.Run("Stats", s.stats)
	t.Run("Leases", s.leases)
	t.Run("Concurrency", s.concurrency)
	t.Run("Bytes", s.bytes)
	if f.Reopen != nil {
		t.Run("Reopen", s.reopen)
	}
}

type suite struct {
	f        Features
	newStore func(t *testing.T) stores.Store
}

// t0 is the suite's epoch; every time it uses is t0 plus whole
// milliseconds, so that backends storing milliseconds compare equal.
var t0 = time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)

func at(d time.Duration) time.Time { return t0.Add(d) }

// fixture is one test's store with a session and route of its own.
type fixture struct {
	t       *testing.T
	s       stores.Store
	session string
	route   string
}

func (s suite) setup(t *testing.T) *fixture {
	t.Helper()
	t.Parallel()
	u := unique()
	return &fixture{t: t, s: s.newStore(t), session: "sess-" + u, route: "route-" + u}
}

func unique() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// rec returns a new live record of the fixture's session and route in
// partition 0, created and received at t0, with a fresh envelope ID.
func (fx *fixture) rec() stores.Record {
	id := message.NewID()
	return stores.Record{
		Session: fx.session,
		Route:   fx.route,
		Envelope: message.Envelope{
			ID: id, Topic: "factory/1/telemetry", Payload: []byte(`{"id":"` + id + `"}`), QoS: 1, ReceivedAt: t0,
		},
		CreatedAt: t0,
	}
}

func (fx *fixture) recs(n int) []stores.Record {
	out := make([]stores.Record, n)
	for i := range out {
		out[i] = fx.rec()
	}
	return out
}

// write commits b and returns it (with what Write stamped).
func (fx *fixture) write(b stores.Batch) stores.Batch {
	fx.t.Helper()
	if err := fx.s.Write(fx.t.Context(), &b); err != nil {
		fx.t.Fatalf("Write: %v", err)
	}
	return b
}

// append appends recs unclaimed and returns them as stamped.
func (fx *fixture) append(recs ...stores.Record) []stores.Record {
	fx.t.Helper()
	return fx.write(stores.Batch{Append: recs}).Append
}

// lease acquires the lease of partition n for owner at now.
func (fx *fixture) lease(n int, owner string, now time.Time) stores.Lease {
	fx.t.Helper()
	le, err := fx.s.Acquire(fx.t.Context(), stores.PartitionLease(fx.session, n), owner, 10*time.Second, now)
	if err != nil {
		fx.t.Fatalf("Acquire partition %d for %s: %v", n, owner, err)
	}
	return le
}

// claim claims up to limit records of partition n under le's token.
func (fx *fixture) claim(n int, le stores.Lease, limit int) []stores.Record {
	fx.t.Helper()
	got, err := fx.s.Claim(fx.t.Context(), stores.ClaimRequest{Session: fx.session, Partition: n, Token: le.Token, Limit: limit})
	if err != nil {
		fx.t.Fatalf("Claim: %v", err)
	}
	return got
}

// drain takes partition n over with a new owner (its lease lapsed) and
// claims everything, returning the envelope IDs in claim order.
func (fx *fixture) drain(n int) []string {
	fx.t.Helper()
	return ids(fx.claim(n, fx.lease(n, "drain-"+unique(), at(1000*time.Hour)), 1000))
}

// settle applies one settlement of each record and returns them (with
// Stale as Write set it).
func (fx *fixture) settle(o stores.Outcome, token int64, reason string, recs ...stores.Record) []stores.Settlement {
	fx.t.Helper()
	b := stores.Batch{}
	for _, r := range recs {
		b.Settle = append(b.Settle, stores.Settlement{
			Key: r.Key(), Token: token, Outcome: o, Attempts: r.Attempts + 1, FirstAttemptAt: t0, Reason: reason, At: at(time.Minute),
		})
	}
	return fx.write(b).Settle
}

func (fx *fixture) sessionStats() stores.SessionStats {
	fx.t.Helper()
	all, err := fx.s.Stats(fx.t.Context())
	if err != nil {
		fx.t.Fatalf("Stats: %v", err)
	}
	for _, st := range all {
		if st.Session == fx.session {
			return st
		}
	}
	return stores.SessionStats{Session: fx.session}
}

func (fx *fixture) dead(q stores.DeadQuery) []stores.Record {
	fx.t.Helper()
	if q.Route == "" && q.ID == "" {
		q.Route = fx.route
	}
	got, _, err := fx.s.Dead(fx.t.Context(), q)
	if err != nil {
		fx.t.Fatalf("Dead(%+v): %v", q, err)
	}
	return got
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
	if len(got) == 0 && len(want) == 0 {
		return
	}
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
