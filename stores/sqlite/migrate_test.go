package sqlite

import (
	"database/sql"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/gobridge/gobridge/message"
	"github.com/gobridge/gobridge/stores"
)

// TestStore_MigratesFromVersion3 builds a file at schema version 3 (one
// outbox table holding every state, before the live, completed and parts
// tables) with pending, claimed, dead and done rows, opens it, and checks
// that every record is where it was: claimable, settleable under its old
// token, listed as dead, or a tombstone that absorbs a re-append.
func TestStore_MigratesFromVersion3(t *testing.T) {
	path := filepath.Join(t.TempDir(), "outbox.db")
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=journal_mode(WAL)")
	if err != nil {
		t.Fatal(err)
	}
	for i, m := range migrations[:3] {
		if _, err := db.Exec(m); err != nil {
			t.Fatalf("migration %d: %v", i+1, err)
		}
	}
	t0 := time.Unix(1_700_000_000, 0).UTC()
	at := func(d time.Duration) int64 { return t0.Add(d).UnixNano() }
	// seq, id, state, okey, ckey, attempts, first attempt, next, token, claim until, dead at, reason, last error
	rows := []struct {
		id, state, okey, ckey    string
		attempts                 int
		first, next, until, dead int64
		token                    int64
		reason, lastErr          string
	}{
		{id: "p1", state: "pending", next: at(0)},
		{id: "p2", state: "pending", okey: "k", attempts: 2, first: at(-time.Hour), next: at(-time.Minute), lastErr: "503"},
		{id: "c1", state: "claimed", attempts: 1, first: at(-time.Minute), next: at(-time.Minute), token: 7, until: at(time.Hour)},
		{id: "p3", state: "pending", ckey: "c", next: at(0)},
		{id: "d1", state: "dead", attempts: 9, first: at(-2 * time.Hour), dead: at(-time.Minute), reason: "poison", lastErr: "500"},
		{id: "x1", state: "done"},
	}
	for i, r := range rows {
		var payload any = []byte("payload-" + r.id)
		if r.state == "done" {
			payload = nil
		}
		_, err := db.Exec(`INSERT INTO outbox (session, part, route, id, topic, payload, headers, qos, received_at,
			okey, ckey, causation_id, state, attempts, first_attempt_at, next_at, last_error, created_at,
			expires_at, token, claim_until, dead_at, dead_reason)
			VALUES ('s', 0, 'r', ?, 't', ?, NULL, 1, ?, ?, ?, '', ?, ?, ?, ?, ?, ?, 0, ?, ?, ?, ?)`,
			r.id, payload, at(time.Duration(i)*time.Second), r.okey, r.ckey, r.state, r.attempts, r.first, r.next,
			r.lastErr, at(time.Duration(i)*time.Second), r.token, r.until, r.dead, r.reason)
		if err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.Exec(`INSERT INTO depth (session, part, live) VALUES ('s', 0, 4)`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`PRAGMA user_version = 3`); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	s, err := Open(path, Options{Sync: "normal"})
	if err != nil {
		t.Fatalf("Open at version 3: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	ctx := t.Context()
	var version int
	if err := s.w.QueryRow(`PRAGMA user_version`).Scan(&version); err != nil || version != len(migrations) {
		t.Fatalf("user_version = %d, %v; want %d", version, err, len(migrations))
	}
	if st, err := s.Stats(ctx, "s"); err != nil || st.Pending != 4 || !st.OldestCreatedAt.Equal(t0) {
		t.Fatalf("Stats = %+v, %v; want 4 live, oldest created at %v", st, err, t0)
	}

	// The pending rows are claimable in seq order with their bookkeeping;
	// the claimed one is not (its claim has not lapsed).
	got, err := s.Claim(ctx, stores.ClaimRequest{Session: "s", Token: 8, Limit: 2, Now: t0, Until: t0.Add(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Envelope.ID != "p1" || got[1].Envelope.ID != "p2" {
		t.Fatalf("Claim = %v, want p1, p2", ids(got))
	}
	p2 := got[1]
	if p2.Attempts != 3 || !p2.FirstAttemptAt.Equal(t0.Add(-time.Hour)) || p2.LastError != "503" ||
		p2.Envelope.Key != "k" || string(p2.Envelope.Payload) != "payload-p2" || got[0].Attempts != 1 ||
		!got[0].FirstAttemptAt.Equal(t0) {
		t.Errorf("claimed p1 = %+v\np2 = %+v", got[0], p2)
	}
	// The claim made before the migration still settles under its token.
	c1 := stores.Record{Session: "s", Route: "r", Envelope: message.Envelope{ID: "c1"}, Token: 7}
	if err := s.Complete(ctx, c1); err != nil {
		t.Fatalf("Complete of the pre-migration claim: %v", err)
	}
	if err := s.Release(ctx, got[0], t0, "again"); err != nil {
		t.Fatal(err)
	}
	if err := s.Complete(ctx, c1); err == nil {
		t.Error("second Complete of c1 succeeded")
	}
	// The pending row with a coalesce key is still replaced by a newer one.
	newer := stores.Record{Session: "s", Route: "r", CoalesceKey: "c", Envelope: message.Envelope{
		ID: "p4", Topic: "t", Payload: []byte("newer"), ReceivedAt: t0.Add(time.Hour)}, NextAttemptAt: t0}
	if err := s.Append(ctx, newer); err != nil {
		t.Fatal(err)
	}
	// Done and live rows absorb re-appends.
	for _, id := range []string{"x1", "p1", "c1"} {
		if err := s.Append(ctx, stores.Record{Session: "s", Route: "r", Envelope: message.Envelope{
			ID: id, Topic: "t", ReceivedAt: t0}, NextAttemptAt: t0}); err != nil {
			t.Fatal(err)
		}
	}
	// p1 (released), p2 (claimed by 8) and p4 (replacing p3) are live.
	if st, err := s.Stats(ctx, "s"); err != nil || st.Pending != 3 {
		t.Fatalf("Stats after settling = %+v, %v; want 3 live", st, err)
	}
	got, err = s.Claim(ctx, stores.ClaimRequest{Session: "s", Token: 9, Limit: 10, Now: t0, Until: t0.Add(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Envelope.ID != "p1" || got[1].Envelope.ID != "p4" || got[0].LastError != "again" {
		t.Fatalf("Claim after settling = %v, want p1 (released), p4", ids(got))
	}
	if err := s.Complete(ctx, p2); err != nil {
		t.Fatal(err)
	}

	dead, _, err := s.ListDead(ctx, stores.DeadFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(dead) != 1 || dead[0].Envelope.ID != "d1" || dead[0].Attempts != 9 || dead[0].DeadReason != "poison" ||
		dead[0].LastError != "500" || !dead[0].DeadAt.Equal(t0.Add(-time.Minute)) ||
		string(dead[0].Envelope.Payload) != "payload-d1" {
		t.Fatalf("ListDead = %+v", dead)
	}
	if _, err := s.Requeue(ctx, "d1", t0); err != nil {
		t.Fatal(err)
	}
	if st, err := s.Stats(ctx, "s"); err != nil || st.Pending != 3 {
		t.Fatalf("Stats after the requeue = %+v, %v; want 3 live (p1, p4, requeued d1)", st, err)
	}
}

func ids(recs []stores.Record) string {
	var out []string
	for _, r := range recs {
		out = append(out, r.Envelope.ID)
	}
	return fmt.Sprint(out)
}
