package storetest

import (
	"testing"
	"time"

	"github.com/gobridge/gobridge/stores"
)

func (s suite) coalesce(t *testing.T) {
	// keyed returns a record with coalesce key k received at recv.
	keyed := func(fx *fixture, k string, recv time.Duration) stores.Record {
		r := fx.rec()
		r.CoalesceKey = k
		r.Envelope.ReceivedAt = at(recv)
		return r
	}

	t.Run("a newer message replaces the unclaimed older ones", func(t *testing.T) {
		fx := s.setup(t)
		a := keyed(fx, "k", 0)
		a.Partition = 1 // coalescing spans the session's partitions
		fx.append(a, keyed(fx, "other", 0))
		b := keyed(fx, "k", time.Second)
		if got := fx.append(b)[0]; got.Seq == 0 {
			t.Fatal("the newer record was not inserted")
		}
		wantIDs(t, "partition 1", fx.drain(1))
		left := fx.drain(0)
		if len(left) != 2 || left[1] != b.Envelope.ID {
			t.Errorf("left %v, want the other key's record and %s", left, b.Envelope.ID)
		}
		if st := fx.sessionStats(); st.Live != 2 {
			t.Errorf("live = %d, want 2", st.Live)
		}
	})

	t.Run("an older message is absorbed by a newer one waiting", func(t *testing.T) {
		fx := s.setup(t)
		newer := keyed(fx, "k", time.Minute)
		fx.append(newer)
		if got := fx.append(keyed(fx, "k", time.Second))[0]; got.Seq != 0 {
			t.Error("the older record was inserted")
		}
		wantIDs(t, "left", fx.drain(0), newer.Envelope.ID)
	})

	// A record received while the clock was set ahead (a bad NTP server)
	// waits; the clock is set back and the next message arrives with an
	// earlier receive time. It is the newer message, and must not be
	// absorbed by the stale one (the store's clock is the real one: the
	// waiting record was received a century after it).
	t.Run("after the clock was set back a new message replaces one received in the future", func(t *testing.T) {
		fx := s.setup(t)
		ahead := keyed(fx, "k", 100*365*24*time.Hour)
		fx.append(ahead)
		b := keyed(fx, "k", time.Second)
		if fx.append(b)[0].Seq == 0 {
			t.Fatal("the new record was absorbed by one received in the future")
		}
		wantIDs(t, "left", fx.drain(0), b.Envelope.ID)
	})

	t.Run("claimed records are never replaced", func(t *testing.T) {
		fx := s.setup(t)
		a := keyed(fx, "k", 0)
		fx.append(a)
		le := fx.lease(0, "o1", t0)
		fx.claim(0, le, 10)
		held := keyed(fx, "k", time.Second)
		held.Token = le.Token // appended claimed: not replaceable either
		fx.append(held)
		c := keyed(fx, "k", 2*time.Second)
		if fx.append(c)[0].Seq == 0 {
			t.Fatal("the newest record was not inserted")
		}
		wantIDs(t, "all three live", fx.drain(0), a.Envelope.ID, held.Envelope.ID, c.Envelope.ID)
	})

	t.Run("within one batch and only within the route", func(t *testing.T) {
		fx := s.setup(t)
		a, b := keyed(fx, "k", 0), keyed(fx, "k", time.Second)
		other := keyed(fx, "k", 0)
		other.Route = fx.route + "-2"
		fx.append(a, other, b)
		wantIDs(t, "left", fx.drain(0), other.Envelope.ID, b.Envelope.ID)
	})

	// Appends apply in order: the earlier record is inserted, then
	// replaced, as if it had come in a batch of its own; its key is
	// remembered, so that its redelivery after the newer one was sent is
	// not sent after it.
	t.Run("within one batch the replaced record was inserted and its key is remembered", func(t *testing.T) {
		fx := s.setup(t)
		a, b := keyed(fx, "k", 0), keyed(fx, "k", time.Second)
		got := fx.append(a, b)
		if got[0].Seq == 0 || got[0].State != stores.Live || got[1].Seq <= got[0].Seq {
			t.Errorf("stamped: seq %d state %q, then seq %d; want both inserted, in order", got[0].Seq, got[0].State, got[1].Seq)
		}
		le := fx.lease(0, "o1", t0)
		wantIDs(t, "claimed", ids(fx.claim(0, le, 10)), b.Envelope.ID)
		fx.settle(stores.Done, le.Token, "", b)
		if again := fx.append(a)[0]; again.Seq != 0 {
			t.Error("the replaced record, appended again after the newer one was delivered, was inserted")
		}
		wantIDs(t, "left", fx.drain(0))
	})
}
