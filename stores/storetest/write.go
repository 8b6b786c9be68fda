package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/gobridge/gobridge/stores"
)

func (s suite) append(t *testing.T) {
	t.Run("stamps state, seq and created time", func(t *testing.T) {
		fx := s.setup(t)
		rs := fx.recs(3)
		rs[2].CreatedAt = time.Time{}
		got := fx.append(rs...)
		for i, r := range got {
			if r.State != stores.Live || r.Seq <= 0 || r.Token != 0 {
				t.Errorf("record %d: state %q seq %d token %d, want live, a seq, unclaimed", i, r.State, r.Seq, r.Token)
			}
			if i > 0 && r.Seq <= got[i-1].Seq {
				t.Errorf("seq %d not above %d", r.Seq, got[i-1].Seq)
			}
		}
		wantTime(t, "given CreatedAt", got[0].CreatedAt, t0)
		if got[2].CreatedAt.IsZero() {
			t.Error("a zero CreatedAt was not stamped")
		}
		wantIDs(t, "claimed", fx.drain(0), ids(rs)...)
	})

	t.Run("is idempotent on the key, in every state", func(t *testing.T) {
		fx := s.setup(t)
		rs := fx.append(fx.recs(3)...)
		le := fx.lease(0, "o1", t0)
		claimed := fx.claim(0, le, 2)
		fx.settle(stores.Done, le.Token, "", claimed[0])
		fx.settle(stores.DeadLetter, le.Token, "bad", claimed[1])
		again := fx.append(rs...) // a tombstone, a dead letter and a live record
		for i, r := range again {
			if r.Seq != 0 {
				t.Errorf("re-append %d was inserted (seq %d)", i, r.Seq)
			}
		}
		wantIDs(t, "claimable", fx.drain(0), rs[2].Envelope.ID)
		if n := len(fx.dead(stores.DeadQuery{})); n != 1 {
			t.Errorf("%d dead letters, want 1", n)
		}
	})

	t.Run("a skipped record comes back with Seq and Token 0", func(t *testing.T) {
		fx := s.setup(t)
		le := fx.lease(0, "o1", t0)
		r := fx.rec()
		r.Token = le.Token
		fx.append(r)
		if got := fx.append(r)[0]; got.Seq != 0 || got.Token != 0 {
			t.Fatalf("appended again under the current token: seq %d token %d, want 0 and 0 (not inserted, not held)", got.Seq, got.Token)
		}
	})

	t.Run("a batch with an invalid record writes nothing", func(t *testing.T) {
		fx := s.setup(t)
		rs := fx.recs(3)
		rs[1].Route = ""
		d := fx.rec()
		d.State = stores.Dead // without a reason
		for _, b := range []stores.Batch{{Append: rs}, {Append: []stores.Record{fx.rec(), d}}} {
			if err := fx.s.Write(t.Context(), &b); !errors.Is(err, stores.ErrInvalid) {
				t.Fatalf("Write = %v, want ErrInvalid", err)
			}
		}
		wantIDs(t, "claimable", fx.drain(0))
	})

	t.Run("appends claimed under the partition's current token", func(t *testing.T) {
		fx := s.setup(t)
		le := fx.lease(0, "o1", t0)
		r := fx.rec()
		r.Token = le.Token
		got := fx.append(r)[0]
		if got.Token != le.Token || got.Seq == 0 {
			t.Fatalf("claimed append: token %d seq %d, want token %d and a seq", got.Token, got.Seq, le.Token)
		}
		wantIDs(t, "claimable by the holder", ids(fx.claim(0, le, 10)))
		wantIDs(t, "claimable by the next owner", fx.drain(0), r.Envelope.ID)
	})

	t.Run("appends unclaimed under a token that is not current", func(t *testing.T) {
		fx := s.setup(t)
		old := fx.lease(0, "o1", t0)
		cur := fx.lease(0, "o2", at(time.Hour))
		stale, none := fx.rec(), fx.rec()
		stale.Token = old.Token
		none.Token = cur.Token + 1000
		none.Partition = 1 // no lease at all
		got := fx.append(stale, none)
		for i, r := range got {
			if r.Token != 0 || r.Seq == 0 {
				t.Errorf("record %d: token %d seq %d, want appended unclaimed", i, r.Token, r.Seq)
			}
		}
		wantIDs(t, "claimable by the current owner", ids(fx.claim(0, cur, 10)), stale.Envelope.ID)
		wantIDs(t, "claimable in partition 1", fx.drain(1), none.Envelope.ID)
	})

	t.Run("appends dead letters", func(t *testing.T) {
		fx := s.setup(t)
		d := fx.rec()
		d.State, d.DeadReason, d.DeadAt, d.Raw = stores.Dead, "processor: bad", at(time.Second), true
		got := fx.append(d)[0]
		if got.State != stores.Dead || got.Seq == 0 {
			t.Fatalf("dead append: state %q seq %d", got.State, got.Seq)
		}
		wantIDs(t, "claimable", fx.drain(0))
		dl := fx.dead(stores.DeadQuery{})
		if len(dl) != 1 || dl[0].DeadReason != "processor: bad" || !dl[0].Raw {
			t.Fatalf("dead letters = %+v", dl)
		}
		wantTime(t, "DeadAt", dl[0].DeadAt, at(time.Second))
	})
}

func (s suite) settle(t *testing.T) {
	t.Run("done removes the record and keeps its key", func(t *testing.T) {
		fx := s.setup(t)
		rs := fx.append(fx.recs(2)...)
		le := fx.lease(0, "o1", t0)
		got := fx.claim(0, le, 10)
		if st := fx.settle(stores.Done, le.Token, "", got[0]); st[0].Stale {
			t.Fatal("Done was stale")
		}
		wantIDs(t, "left", fx.drain(0), rs[1].Envelope.ID)
		if st := fx.sessionStats(); st.Live != 1 {
			t.Errorf("live = %d, want 1", st.Live)
		}
		if fx.append(rs[0])[0].Seq != 0 {
			t.Error("a delivered record was appended again")
		}
	})

	t.Run("retry keeps the claim and its bookkeeping", func(t *testing.T) {
		fx := s.setup(t)
		r := fx.append(fx.rec())[0]
		le := fx.lease(0, "o1", t0)
		fx.claim(0, le, 10)
		b := fx.write(stores.Batch{Settle: []stores.Settlement{{
			Key: r.Key(), Token: le.Token, Outcome: stores.Retry, Attempts: 3,
			FirstAttemptAt: at(time.Second), NextAttemptAt: at(time.Minute), Reason: "503",
		}}})
		if b.Settle[0].Stale {
			t.Fatal("Retry was stale")
		}
		wantIDs(t, "claimable by the holder", ids(fx.claim(0, le, 10)))
		next := fx.claim(0, fx.lease(0, "o2", at(time.Hour)), 10)
		if len(next) != 1 {
			t.Fatalf("claimed %d, want 1", len(next))
		}
		g := next[0]
		if g.Attempts != 3 || g.LastError != "503" {
			t.Errorf("attempts %d last error %q", g.Attempts, g.LastError)
		}
		wantTime(t, "FirstAttemptAt", g.FirstAttemptAt, at(time.Second))
		wantTime(t, "NextAttemptAt", g.NextAttemptAt, at(time.Minute))
	})

	t.Run("dead letter moves the record to the dead letters", func(t *testing.T) {
		fx := s.setup(t)
		r := fx.append(fx.rec())[0]
		le := fx.lease(0, "o1", t0)
		fx.claim(0, le, 10)
		fx.settle(stores.DeadLetter, le.Token, "http 400", r)
		wantIDs(t, "claimable", fx.drain(0))
		dl := fx.dead(stores.DeadQuery{ID: r.Envelope.ID})
		if len(dl) != 1 || dl[0].State != stores.Dead || dl[0].DeadReason != "http 400" || dl[0].Attempts != 1 {
			t.Fatalf("dead letter = %+v", dl)
		}
		wantTime(t, "DeadAt", dl[0].DeadAt, at(time.Minute))
		if st := fx.sessionStats(); st.Live != 0 || st.Routes[fx.route].Dead != 1 {
			t.Errorf("stats = %+v", st)
		}
	})

	t.Run("stale settlements are skipped and the rest applies", func(t *testing.T) {
		fx := s.setup(t)
		rs := fx.append(fx.recs(3)...)
		old := fx.lease(0, "o1", t0)
		fx.claim(0, old, 10)
		cur := fx.lease(0, "o2", at(time.Hour))
		fx.claim(0, cur, 1) // takes rs[0] over
		b := stores.Batch{Settle: []stores.Settlement{
			{Key: rs[0].Key(), Token: old.Token, Outcome: stores.Done},                                          // taken over
			{Key: rs[1].Key(), Token: old.Token, Outcome: stores.Done},                                          // still old's
			{Key: rs[2].Key(), Token: old.Token + 99999, Outcome: stores.Done},                                  // never that token
			{Key: stores.Key{Session: fx.session, Route: fx.route, ID: "nope"}, Token: 1, Outcome: stores.Done}, // gone
			{Key: rs[2].Key(), Outcome: stores.Drop},                                                            // not a dead letter
		}}
		b = fx.write(b)
		for i, want := range []bool{true, false, true, true, true} {
			if b.Settle[i].Stale != want {
				t.Errorf("settlement %d: stale %v, want %v", i, b.Settle[i].Stale, want)
			}
		}
		wantIDs(t, "left", fx.drain(0), rs[0].Envelope.ID, rs[2].Envelope.ID)
	})

	// A drainer may retry a record and settle it again before its Retry was
	// written (a short backoff; a slow write): the batch then settles one
	// key twice, and each settlement applies on its own, in order.
	t.Run("a retry and the next outcome of one record in one batch both apply", func(t *testing.T) {
		fx := s.setup(t)
		rs := fx.append(fx.recs(3)...)
		le := fx.lease(0, "o1", t0)
		fx.claim(0, le, 10)
		retry := func(r stores.Record, attempts int, reason string) stores.Settlement {
			return stores.Settlement{Key: r.Key(), Token: le.Token, Outcome: stores.Retry, Attempts: attempts,
				FirstAttemptAt: t0, NextAttemptAt: at(time.Duration(attempts) * time.Minute), Reason: reason, At: at(time.Minute)}
		}
		done := func(r stores.Record) stores.Settlement {
			return stores.Settlement{Key: r.Key(), Token: le.Token, Outcome: stores.Done, Attempts: 2, FirstAttemptAt: t0, At: at(time.Minute)}
		}
		b := fx.write(stores.Batch{Settle: []stores.Settlement{
			retry(rs[0], 1, "503"), done(rs[0]), // sent again, delivered
			retry(rs[1], 1, "503"), retry(rs[1], 2, "504"), // failed twice
			done(rs[2]), retry(rs[2], 1, "late"), // nothing follows a Done
		}})
		for i, want := range []bool{false, false, false, false, false, true} {
			if b.Settle[i].Stale != want {
				t.Errorf("settlement %d (outcome %d): stale %v, want %v", i, b.Settle[i].Outcome, b.Settle[i].Stale, want)
			}
		}
		got := fx.claim(0, fx.lease(0, "o2", at(time.Hour)), 10)
		if len(got) != 1 || got[0].Envelope.ID != rs[1].Envelope.ID {
			t.Fatalf("claimable after the batch: %v, want only %s", ids(got), rs[1].Envelope.ID)
		}
		if g := got[0]; g.Attempts != 2 || g.LastError != "504" {
			t.Errorf("the record retried twice: attempts %d, last error %q; want the second settlement's 2, \"504\"", g.Attempts, g.LastError)
		}
		if st := fx.sessionStats(); st.Live != 1 {
			t.Errorf("live = %d, want 1", st.Live)
		}
	})

	// Each applies as it would alone: a drainer whose lease was taken
	// again settles, in one batch, a send under the old token and one
	// under the new token; a dead letter may be dropped in the batch that
	// makes it.
	t.Run("of settlements of one record in one batch a stale one does not stop the next", func(t *testing.T) {
		fx := s.setup(t)
		rs := fx.append(fx.recs(4)...)
		old := fx.lease(0, "o1", t0)
		fx.claim(0, old, 10)
		le := fx.lease(0, "o1", t0) // taken again: a new token
		fx.claim(0, le, 10)
		st := func(r stores.Record, o stores.Outcome, token int64) stores.Settlement {
			return stores.Settlement{Key: r.Key(), Token: token, Outcome: o, Attempts: 1, FirstAttemptAt: t0, Reason: "503"}
		}
		b := fx.write(stores.Batch{Settle: []stores.Settlement{
			st(rs[0], stores.Done, old.Token), st(rs[0], stores.Done, le.Token),
			st(rs[1], stores.Retry, old.Token), st(rs[1], stores.Done, le.Token),
			st(rs[2], stores.Done, le.Token), st(rs[2], stores.Done, le.Token),
			st(rs[3], stores.DeadLetter, le.Token), {Key: rs[3].Key(), Outcome: stores.Drop},
		}})
		for i, want := range []bool{true, false, true, false, false, true, false, false} {
			if b.Settle[i].Stale != want {
				t.Errorf("settlement %d (outcome %d): stale %v, want %v", i, b.Settle[i].Outcome, b.Settle[i].Stale, want)
			}
		}
		wantIDs(t, "claimable after the batch", fx.drain(0))
		if st := fx.sessionStats(); st.Live != 0 || st.Routes[fx.route].Dead != 0 {
			t.Errorf("live = %d, dead = %d, want none", st.Live, st.Routes[fx.route].Dead)
		}
		if fx.append(rs[3])[0].Seq != 0 {
			t.Error("the dropped dead letter was appended again")
		}
	})

	t.Run("a retry then a dead-lettering of one record in one batch: the dead letter is as the retry left it", func(t *testing.T) {
		fx := s.setup(t)
		r := fx.append(fx.rec())[0]
		le := fx.lease(0, "o1", t0)
		fx.claim(0, le, 10)
		b := fx.write(stores.Batch{Settle: []stores.Settlement{
			{Key: r.Key(), Token: le.Token, Outcome: stores.Retry, Attempts: 1, FirstAttemptAt: t0, NextAttemptAt: at(time.Minute), Reason: "503"},
			{Key: r.Key(), Token: le.Token, Outcome: stores.DeadLetter, Attempts: 2, FirstAttemptAt: t0, Reason: "400", At: at(2 * time.Minute)},
		}})
		if b.Settle[0].Stale || b.Settle[1].Stale {
			t.Fatalf("stale: %v, %v; want both applied", b.Settle[0].Stale, b.Settle[1].Stale)
		}
		got := fx.dead(stores.DeadQuery{})
		if len(got) != 1 {
			t.Fatalf("%d dead letters, want 1", len(got))
		}
		wantTime(t, "NextAttemptAt (set by the retry, kept by the dead-lettering)", got[0].NextAttemptAt, at(time.Minute))
		if got[0].Attempts != 2 || got[0].LastError != "400" || got[0].DeadReason != "400" {
			t.Errorf("dead letter: attempts %d, last error %q, reason %q; want 2, \"400\", \"400\"", got[0].Attempts, got[0].LastError, got[0].DeadReason)
		}
	})

	// A drainer that lost its lease while the writer could not write (a
	// store outage) leaves its outcomes queued; the same process may take
	// the partition back under a new token, claim the records again and
	// settle them before the writer catches up: one batch then settles a
	// key under an old and a new token. Those under the record's token
	// apply, the others are stale, as each settlement on its own.
	t.Run("outcomes of one record under an old and a new token in one batch", func(t *testing.T) {
		fx := s.setup(t)
		rs := fx.append(fx.recs(5)...)
		old := fx.lease(0, "o1", t0)
		fx.claim(0, old, 10)
		cur := fx.lease(0, "o1", at(time.Hour))
		fx.claim(0, cur, 4) // takes rs[0:4] over; rs[4] stays old's
		st := func(r stores.Record, le stores.Lease, o stores.Outcome, reason string) stores.Settlement {
			return stores.Settlement{Key: r.Key(), Token: le.Token, Outcome: o, Attempts: 1, FirstAttemptAt: t0,
				NextAttemptAt: at(2 * time.Hour), Reason: reason, At: at(time.Hour)}
		}
		b := fx.write(stores.Batch{Settle: []stores.Settlement{
			st(rs[0], old, stores.Done, ""), st(rs[0], cur, stores.Done, ""),
			st(rs[1], old, stores.Retry, "503"), st(rs[1], cur, stores.Done, ""),
			st(rs[2], old, stores.Retry, "503"), st(rs[2], cur, stores.DeadLetter, "http 400"),
			st(rs[3], cur, stores.Done, ""), st(rs[3], old, stores.Retry, "late"),
			st(rs[4], old, stores.Retry, "503"), st(rs[4], cur, stores.Done, ""),
		}})
		for i, want := range []bool{true, false, true, false, true, false, false, true, false, true} {
			if b.Settle[i].Stale != want {
				t.Errorf("settlement %d (record %d, outcome %d, old token %v): stale %v, want %v",
					i, i/2, b.Settle[i].Outcome, b.Settle[i].Token == old.Token, b.Settle[i].Stale, want)
			}
		}
		got := fx.claim(0, fx.lease(0, "o2", at(3*time.Hour)), 10)
		if len(got) != 1 || got[0].Envelope.ID != rs[4].Envelope.ID {
			t.Fatalf("claimable after the batch: %v, want only %s (the one still claimed under the old token)", ids(got), rs[4].Envelope.ID)
		}
		if g := got[0]; g.Attempts != 1 || g.LastError != "503" {
			t.Errorf("record retried under its token: attempts %d, last error %q; want 1, \"503\"", g.Attempts, g.LastError)
		}
		if st := fx.sessionStats(); st.Live != 1 || st.Routes[fx.route].Dead != 1 {
			t.Errorf("live = %d, dead = %d; want 1, 1", st.Live, st.Routes[fx.route].Dead)
		}
	})

	t.Run("drop deletes a dead letter and keeps its key", func(t *testing.T) {
		fx := s.setup(t)
		d := fx.rec()
		d.State, d.DeadReason = stores.Dead, "bad"
		fx.append(d)
		b := fx.write(stores.Batch{Settle: []stores.Settlement{{Key: d.Key(), Outcome: stores.Drop}}})
		if b.Settle[0].Stale {
			t.Fatal("Drop was stale")
		}
		if _, _, err := fx.s.Dead(t.Context(), stores.DeadQuery{ID: d.Envelope.ID}); !errors.Is(err, stores.ErrNotFound) {
			t.Errorf("Dead after Drop = %v, want ErrNotFound", err)
		}
		d.State = stores.Live
		if fx.append(d)[0].Seq != 0 {
			t.Error("a dropped dead letter was appended again")
		}
	})

	t.Run("requeue appends the dead letter anew, once", func(t *testing.T) {
		fx := s.setup(t)
		d := fx.rec()
		d.State, d.DeadReason, d.DeadAt, d.Attempts, d.Raw = stores.Dead, "bad", at(time.Second), 4, true
		fx.append(d)
		dead := fx.dead(stores.DeadQuery{ID: d.Envelope.ID})[0]
		for range 2 {
			r, err := stores.Requeued(dead, fx.session, 1, at(time.Hour))
			if err != nil {
				t.Fatal(err)
			}
			fx.write(stores.Batch{Append: []stores.Record{r}, Settle: []stores.Settlement{{Key: dead.Key(), Outcome: stores.Drop}}})
		}
		got := fx.claim(0, fx.lease(0, "o1", t0), 10)
		if len(got) != 1 {
			t.Fatalf("claimed %d requeued records, want 1", len(got))
		}
		g := got[0]
		if g.CausationID != d.Envelope.ID || g.Envelope.ID == d.Envelope.ID || g.Attempts != 0 || !g.Raw || g.State != stores.Live {
			t.Errorf("requeued record = %+v", g)
		}
		if len(fx.dead(stores.DeadQuery{})) != 0 {
			t.Error("the dead letter is still there")
		}
	})
}
