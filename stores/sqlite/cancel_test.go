package sqlite_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/gobridge/gobridge/message"
	"github.com/gobridge/gobridge/stores"
	"github.com/gobridge/gobridge/stores/sqlite"
)

// A call whose context ends while it runs fails or succeeds, and leaves
// the store usable: the driver may report the end of the context after a
// statement (BEGIN) ran, and a transaction left open would fail every
// later call ("cannot start a transaction within a transaction").
func TestStore_CancelledCallsLeaveNoTransactionOpen(t *testing.T) {
	t.Parallel()
	s := open(t, filepath.Join(t.TempDir(), "outbox.db"), sqlite.Options{})
	bg := context.Background()
	le, err := s.Acquire(bg, stores.PartitionLease("s", 0), "o", time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for i := range 300 {
		var recs []stores.Record
		for j := range 20 {
			recs = append(recs, stores.Record{Session: "s", Route: "r", Envelope: message.Envelope{
				ID: strconv.Itoa(i) + "-" + strconv.Itoa(j), Payload: make([]byte, 100)}})
		}
		// Deadlines from 0 to 600µs end the calls at every step.
		ctx, cancel := context.WithTimeout(bg, time.Duration(i%30)*20*time.Microsecond)
		b := stores.Batch{Append: recs}
		if s.Write(ctx, &b) == nil {
			want = append(want, ids(b.Append)...)
		}
		_, _ = s.Claim(ctx, stores.ClaimRequest{Session: "s", Token: le.Token, Limit: 5})
		cancel()
		one := stores.Batch{Append: []stores.Record{{Session: "s", Route: "r", Envelope: message.Envelope{ID: "plain-" + strconv.Itoa(i)}}}}
		if err := s.Write(bg, &one); err != nil {
			t.Fatalf("a Write after %d cancelled calls: %v", i+1, err)
		}
		want = append(want, "plain-"+strconv.Itoa(i))
	}
	le, err = s.Acquire(bg, stores.PartitionLease("s", 0), "o", time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.Claim(bg, stores.ClaimRequest{Session: "s", Token: le.Token, Limit: 100_000})
	if err != nil {
		t.Fatal(err)
	}
	st, err := s.Stats(bg)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) || len(st) != 1 || st[0].Live != len(want) {
		t.Errorf("claimed %d records, stats %+v; want %d written", len(got), st, len(want))
	}
}

func ids(recs []stores.Record) []string {
	var out []string
	for _, r := range recs {
		if r.Seq != 0 {
			out = append(out, r.Envelope.ID)
		}
	}
	return out
}

// A call waiting for the store, behind a call that is itself waiting
// inside SQLite (another connection holds the write lock: busy_timeout
// lets it wait 5 s), ends with its context, and so does the call inside
// SQLite: a shutdown is never held by a call it has given up on.
func TestStore_CallsWaitingForTheStoreEndWithTheirContext(t *testing.T) {
	t.Parallel()
	bg := context.Background()
	inside := make(chan struct{}) // the Write holds the store
	var once sync.Once
	s := open(t, filepath.Join(t.TempDir(), "outbox.db"), sqlite.Options{Now: func() time.Time {
		once.Do(func() { close(inside) })
		return time.Now()
	}})
	le, err := s.Acquire(bg, "instance/x", "o", time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	other, err := sql.Open("sqlite", "file:"+s.Path())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = other.Close() })
	conn, err := other.Conn(bg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(bg, `BEGIN IMMEDIATE`); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = conn.ExecContext(bg, `ROLLBACK`); _ = conn.Close() })

	wctx, stopWrite := context.WithCancel(bg)
	defer stopWrite()
	written := make(chan error, 1)
	go func() {
		b := stores.Batch{Append: []stores.Record{{Session: "s", Route: "r", Envelope: message.Envelope{ID: "1"}}}}
		written <- s.Write(wctx, &b)
	}()
	<-inside
	rctx, stopRenew := context.WithCancel(bg)
	renewed := make(chan error, 1)
	go func() {
		_, err := s.Renew(&cancelOnLook{Context: rctx, cancel: stopRenew}, le, time.Hour, time.Now())
		renewed <- err
	}()
	select {
	case err := <-renewed:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Renew = %v; want context.Canceled", err)
		}
	case err := <-written:
		t.Fatalf("the Write ended (%v) before the cancelled Renew waiting for it", err)
	}
	stopWrite()
	if err := <-written; err == nil {
		t.Error("the Write waiting for the write lock succeeded after its context ended")
	}
}

// cancelOnLook is a context that ends as soon as its callee first looks at
// it (Err), so that the callee then waits with its context done.
type cancelOnLook struct {
	context.Context
	cancel context.CancelFunc
	once   sync.Once
}

func (c *cancelOnLook) Err() error {
	err := c.Context.Err()
	c.once.Do(c.cancel)
	return err
}
