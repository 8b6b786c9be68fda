package storetest

import (
	"maps"
	"testing"
	"time"

	"github.com/gobridge/gobridge/stores"
)

// bytes: what a record holds is kept byte for byte, also where it is not
// UTF-8. Message data reaches these fields unchecked (an HTTP ingest header
// with obs-text bytes, a set_headers, idempotency_key or coalesce template
// of such a header); a store that changed them (DynamoDB's JSON protocol
// turns each invalid byte into U+FFFD) would deliver other data than it
// was given and, with the ID changed, not find the record to settle it.
func (s suite) bytes(t *testing.T) {
	fx := s.setup(t)
	r := fx.rec()
	r.Envelope.ID = "id-\xff\xfe"
	r.Envelope.Key = "key-\xc3"
	r.Envelope.Headers = map[string]string{"X-Site": "site-\x80", "Empty": ""}
	r.CoalesceKey = "co-\xed\xa0\x80"
	r.Partition = 0
	fx.append(r)
	le := fx.lease(0, "o-"+unique(), at(1000*time.Hour))
	got := fx.claim(0, le, 10)
	if len(got) != 1 {
		t.Fatalf("claimed %d records, want 1", len(got))
	}
	g := got[0].Envelope
	if g.ID != r.Envelope.ID || g.Key != r.Envelope.Key || got[0].CoalesceKey != r.CoalesceKey || !maps.Equal(g.Headers, r.Envelope.Headers) {
		t.Fatalf("claimed ID %q key %q coalesce key %q headers %q, want %q %q %q %q",
			g.ID, g.Key, got[0].CoalesceKey, g.Headers, r.Envelope.ID, r.Envelope.Key, r.CoalesceKey, r.Envelope.Headers)
	}
	if st := fx.settle(stores.Done, le.Token, "", got[0]); st[0].Stale {
		t.Fatal("the claimed record could not be settled: stale")
	}
	if again := fx.append(r)[0]; again.Seq != 0 {
		t.Fatalf("re-append after delivery was inserted (seq %d), want absorbed", again.Seq)
	}

	// Coalescing finds the older record of such a key, and only it.
	older, newer, other := fx.rec(), fx.rec(), fx.rec()
	older.Envelope.ID, newer.Envelope.ID, other.Envelope.ID = "old-\xff", "new-\xff", "other-\xff"
	older.CoalesceKey, newer.CoalesceKey, other.CoalesceKey = "ck-\xff", "ck-\xff", "ck-\xfe"
	newer.Envelope.ReceivedAt = at(time.Second)
	fx.append(older, other)
	fx.append(newer)
	wantIDs(t, "claimable after coalescing", ids(fx.claim(0, le, 10)), other.Envelope.ID, newer.Envelope.ID)
}
