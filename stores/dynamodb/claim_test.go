package dynamodb_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/gobridge/gobridge/message"
	"github.com/gobridge/gobridge/stores"
	"github.com/gobridge/gobridge/stores/dynamodb"
)

var t0 = time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)

// bundle is a store whose requests are counted, with a session of its own.
type bundle struct {
	s       *dynamodb.Store
	cnt     *counter
	session string
	route   string
}

func setup(t testing.TB) *bundle {
	t.Helper()
	_, table := sharedTable(t)
	cnt := &counter{}
	s := openStore(t, newClient(t, cnt), table)
	return &bundle{s: s, cnt: cnt, session: uniqueName("sess-"), route: uniqueName("route-")}
}

func (b *bundle) recs(n int, key string) []stores.Record {
	out := make([]stores.Record, n)
	for i := range out {
		out[i] = stores.Record{
			Session: b.session, Route: b.route,
			Envelope:  message.Envelope{ID: message.NewID(), Topic: "t", Payload: []byte("{}"), QoS: 1, ReceivedAt: t0, Key: key},
			CreatedAt: t0, NextAttemptAt: t0,
		}
	}
	return out
}

func (b *bundle) append(t testing.TB, recs []stores.Record) {
	t.Helper()
	for len(recs) > 0 {
		n := min(len(recs), 90)
		if err := b.s.Append(t.Context(), recs[:n]...); err != nil {
			t.Fatalf("Append: %v", err)
		}
		recs = recs[n:]
	}
}

func (b *bundle) claim(t testing.TB, token int64, limit int, now time.Time) []stores.Record {
	t.Helper()
	got, err := b.s.Claim(t.Context(), stores.ClaimRequest{
		Session: b.session, Token: token, Limit: limit, Now: now, Until: now.Add(30 * time.Second),
	})
	if err != nil {
		t.Fatalf("Claim: %v", err)
	}
	return got
}

// requests runs f and returns how many HTTP requests it made.
func (b *bundle) requests(f func()) int64 {
	before := b.cnt.n.Load()
	f()
	return b.cnt.n.Load() - before
}

func TestStore_ClaimCostDoesNotGrowWithBacklog(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// A backlog of fresh records, and in front of it (older Seq) records
	// that failed and wait for their next attempt, as during an outage.
	waiting := b.recs(150, "")
	b.append(t, waiting)
	for len(b.claim(t, 1, 50, t0)) > 0 {
	}
	// Release all of them with a backoff.
	for _, r := range claimAll(t, b, waiting) {
		if err := b.s.Release(t.Context(), r, t0.Add(time.Hour), "down"); err != nil {
			t.Fatal(err)
		}
	}
	fresh := b.recs(200, "")
	b.append(t, fresh)
	var got []stores.Record
	n := b.requests(func() { got = b.claim(t, 2, 10, t0.Add(time.Minute)) })
	if len(got) != 10 || got[0].Envelope.ID != fresh[0].Envelope.ID {
		t.Fatalf("claimed %d records starting %v, want the 10 oldest fresh ones", len(got), firstID(got))
	}
	// Timer query, ready query, one transaction: independent of the 150
	// waiting and the 190 remaining records.
	if n != 3 {
		t.Errorf("Claim of 10 made %d requests, want 3", n)
	}
	n = b.requests(func() {
		if err := b.s.Complete(t.Context(), got...); err != nil {
			t.Fatal(err)
		}
	})
	if n != 1 {
		t.Errorf("Complete of 10 made %d requests, want 1", n)
	}
}

// claimAll returns the records of want, re-reading them by claiming them
// again after their claims lapse.
func claimAll(t *testing.T, b *bundle, want []stores.Record) []stores.Record {
	t.Helper()
	got := b.claim(t, 1, len(want), t0.Add(30*time.Second))
	if len(got) != len(want) {
		t.Fatalf("re-claimed %d, want %d", len(got), len(want))
	}
	return got
}

func firstID(rs []stores.Record) string {
	if len(rs) == 0 {
		return "(none)"
	}
	return rs[0].Envelope.ID
}

func TestStore_ClaimSkipsABlockedKeyWithoutStarvingOthers(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// a1 is claimed and holds back a2..a1200; b1 comes after all of them.
	as := b.recs(1200, "a")
	b.append(t, as)
	bs := b.recs(1, "b")
	b.append(t, bs)
	first := b.claim(t, 1, 1, t0)
	if len(first) != 1 || first[0].Envelope.ID != as[0].Envelope.ID {
		t.Fatalf("first claim = %v, want a1", firstID(first))
	}
	var got []stores.Record
	n := b.requests(func() { got = b.claim(t, 1, 10, t0) })
	if len(got) != 1 || got[0].Envelope.ID != bs[0].Envelope.ID {
		t.Fatalf("claim while a1 is claimed = %d records starting %v, want only b1", len(got), firstID(got))
	}
	t.Logf("claim past 1199 held-back records: %d requests", n)
	// Timer, first ready page, key a, two filtered pages that skip key a,
	// key b, the transaction.
	if n > 7 {
		t.Errorf("claim past 1199 held-back records made %d requests, want at most 7", n)
	}
	if err := b.s.Complete(t.Context(), first...); err != nil {
		t.Fatal(err)
	}
	got = b.claim(t, 1, 5, t0)
	if len(got) != 5 {
		t.Fatalf("claimed %d after a1 is done, want 5", len(got))
	}
	for i, r := range got {
		if r.Envelope.ID != as[i+1].Envelope.ID {
			t.Fatalf("claim %d after a1 is done = %s, want a%d in order", i, r.Envelope.ID, i+2)
		}
	}
}

func TestStore_StaleOwnerCannotSettleTakenOverRecords(t *testing.T) {
	t.Parallel()
	// Two instances share one table and one lease.
	b := setup(t)
	other := openStore(t, newClient(t, nil), tableOf(t))
	_, table := sharedTable(t)
	leases, err := dynamodb.OpenLeases(t.Context(), dynamodb.Options{LeaseTable: table, Client: newClient(t, nil)})
	if err != nil {
		t.Fatal(err)
	}
	name := b.session + "/0"
	la, err := leases.Acquire(t.Context(), name, "instance-a", 10*time.Second, t0)
	if err != nil {
		t.Fatal(err)
	}
	b.append(t, b.recs(3, "k"))
	claimedA := b.claim(t, la.Token, 3, t0)
	if len(claimedA) != 3 {
		t.Fatalf("instance a claimed %d, want 3", len(claimedA))
	}
	// Instance a pauses past its lease and its claims; b takes over.
	later := t0.Add(time.Minute)
	if _, err := leases.Acquire(t.Context(), name, "instance-b", 10*time.Second, t0.Add(5*time.Second)); !errors.Is(err, stores.ErrLeaseHeld) {
		t.Fatalf("takeover before the lease lapsed = %v, want ErrLeaseHeld", err)
	}
	lb, err := leases.Acquire(t.Context(), name, "instance-b", 10*time.Second, later)
	if err != nil {
		t.Fatal(err)
	}
	if lb.Token <= la.Token {
		t.Fatalf("takeover token %d not above %d", lb.Token, la.Token)
	}
	claimedB, err := other.Claim(t.Context(), stores.ClaimRequest{
		Session: b.session, Token: lb.Token, Limit: 10, Now: later, Until: later.Add(30 * time.Second),
	})
	if err != nil || len(claimedB) != 3 {
		t.Fatalf("instance b claimed %d, %v; want 3", len(claimedB), err)
	}
	// Every state change by a is refused with ErrStaleToken.
	err = b.s.Complete(t.Context(), claimedA...)
	if !errors.Is(err, stores.ErrStaleToken) {
		t.Fatalf("stale Complete = %v, want ErrStaleToken", err)
	}
	if err := b.s.Release(t.Context(), claimedA[0], later, "x"); !errors.Is(err, stores.ErrStaleToken) {
		t.Fatalf("stale Release = %v, want ErrStaleToken", err)
	}
	if err := b.s.DeadLetter(t.Context(), claimedA[1], "x"); !errors.Is(err, stores.ErrStaleToken) {
		t.Fatalf("stale DeadLetter = %v, want ErrStaleToken", err)
	}
	if _, err := leases.Renew(t.Context(), la, 10*time.Second, later); !errors.Is(err, stores.ErrLeaseLost) {
		t.Fatalf("stale Renew = %v, want ErrLeaseLost", err)
	}
	// The new owner settles everything.
	if err := other.Complete(t.Context(), claimedB...); err != nil {
		t.Fatalf("Complete by the new owner: %v", err)
	}
	if st, err := other.Stats(t.Context(), b.session); err != nil || st.Pending != 0 {
		t.Fatalf("Stats = %+v, %v; want empty", st, err)
	}
}

func tableOf(t testing.TB) string {
	_, table := sharedTable(t)
	return table
}

func TestStore_AppendOverOneTransactionIsChunked(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rs := b.recs(250, "")
	n := b.requests(func() {
		if err := b.s.Append(t.Context(), rs...); err != nil {
			t.Fatalf("Append of 250: %v", err)
		}
	})
	// One Seq reservation plus three transactions of at most 99 records
	// and their counter.
	if n != 4 {
		t.Errorf("Append of 250 made %d requests, want 4", n)
	}
	// Appending them again is a no-op, also across chunks.
	if err := b.s.Append(t.Context(), rs...); err != nil {
		t.Fatalf("re-Append: %v", err)
	}
	st, err := b.s.Stats(t.Context(), b.session)
	if err != nil || st.Pending != 250 {
		t.Fatalf("Stats = %+v, %v; want 250 pending", st, err)
	}
	got := b.claim(t, 1, 250, t0)
	if len(got) != 250 {
		t.Fatalf("claimed %d, want 250", len(got))
	}
	for i := range got {
		if got[i].Envelope.ID != rs[i].Envelope.ID {
			t.Fatalf("claim %d = %s, want %s (persist order)", i, got[i].Envelope.ID, rs[i].Envelope.ID)
		}
	}
	if err := b.s.Complete(t.Context(), got...); err != nil {
		t.Fatalf("Complete of 250: %v", err)
	}
}

func TestStore_AppendRejectsOversizedRecord(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.recs(1, "")[0]
	r.Envelope.Payload = make([]byte, 400<<10)
	if err := b.s.Append(t.Context(), r); !errors.Is(err, stores.ErrInvalid) {
		t.Fatalf("Append of a 400 KB payload = %v, want ErrInvalid", err)
	}
	if err := b.s.Append(t.Context(), b.recs(1, "")[0], r); !errors.Is(err, stores.ErrInvalid) {
		t.Fatalf("Append of a batch with it = %v, want ErrInvalid", err)
	}
	if st, err := b.s.Stats(t.Context(), b.session); err != nil || st.Pending != 0 {
		t.Fatalf("Stats = %+v, %v; want nothing appended", st, err)
	}
}

func TestStore_ListDeadRejectsBadCursor(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, c := range []string{"x", "1.2", fmt.Sprintf("%020d", 1)} {
		if _, _, err := b.s.ListDead(t.Context(), stores.DeadFilter{After: c}); !errors.Is(err, stores.ErrInvalid) {
			t.Errorf("ListDead(After %q) = %v, want ErrInvalid", c, err)
		}
	}
}

func TestStore_CallsAfterCloseFail(t *testing.T) {
	t.Parallel()
	b := setup(t)
	if err := b.s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := b.s.Append(t.Context(), b.recs(1, "")...); err == nil {
		t.Fatal("Append after Close succeeded")
	}
	if _, err := b.s.Claim(t.Context(), stores.ClaimRequest{Session: b.session, Limit: 1}); err == nil {
		t.Fatal("Claim after Close succeeded")
	}
}
