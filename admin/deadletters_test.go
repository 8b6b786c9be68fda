package admin_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/gobridge/gobridge/admin"
	"github.com/gobridge/gobridge/message"
	"github.com/gobridge/gobridge/stores"
)

// bulkStep is the answer of one bulk call.
type bulkStep struct {
	Done      int      `json:"done"`
	Failed    []string `json:"failed"`
	Remaining bool     `json:"remaining"`
	Next      string   `json:"next"`
	Until     string   `json:"until"`
}

// bulkAll runs a bulk verb on route the way the console does, calling
// between steps (as a drainer of a still broken target would run);
// it returns the steps. It gives up after 20 steps.
func (fx *fixture) bulkAll(t *testing.T, verb, route string, limit int, between func()) []bulkStep {
	t.Helper()
	var steps []bulkStep
	var last bulkStep
	for range 20 {
		q := url.Values{"route": {route}, "limit": {itoa(limit)}, "after": {last.Next}, "until": {last.Until}}
		code, body := fx.do(t, "POST", "/api/dead-letters/"+verb+"?"+q.Encode(), local, "X-Requested-By", "t")
		if code != http.StatusOK {
			t.Fatalf("bulk %s step %d: %d %s", verb, len(steps), code, body)
		}
		last = bulkStep{}
		if err := json.Unmarshal([]byte(body), &last); err != nil {
			t.Fatal(err)
		}
		steps = append(steps, last)
		if !last.Remaining {
			return steps
		}
		between()
	}
	t.Fatalf("bulk %s did not finish in 20 steps; the last: %d done, %d failed", verb, last.Done, len(last.Failed))
	return nil
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

// redie dead-letters every live record of session "plant" again, as the
// drainer does while the target still rejects them.
func redie(t *testing.T, st stores.Store, owner string) int {
	t.Helper()
	ctx := t.Context()
	le, err := st.Acquire(ctx, stores.PartitionLease("plant", 0), owner, time.Minute, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	recs, err := st.Claim(ctx, stores.ClaimRequest{Session: "plant", Token: le.Token, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	b := &stores.Batch{}
	for i := range recs {
		b.Settle = append(b.Settle, stores.Settlement{Key: recs[i].Key(), Token: le.Token, Outcome: stores.DeadLetter,
			Attempts: 1, Reason: "permanent: http 422: still unprocessable"})
	}
	if err := st.Write(ctx, b); err != nil {
		t.Fatal(err)
	}
	return len(recs)
}

// A bulk requeue requeues each dead letter it started with once, even when
// the requeued records die again while it runs (the target is still
// broken): those are new dead letters, left for the operator to see.
func TestHandler_BulkRequeueTakesEachLetterOnce(t *testing.T) {
	fx := setup(t, "")
	deadLetters(t, fx.st, "alarms", 5, []byte("x"))
	died, owner := 0, "drainer-"+message.NewID()
	steps := fx.bulkAll(t, "requeue", "alarms", 2, func() { died += redie(t, fx.st, owner) })
	done := 0
	for _, s := range steps {
		done += s.Done
	}
	if done != 5 {
		t.Errorf("bulk requeue of 5 dead letters requeued %d (%d died again meanwhile): %+v", done, died, steps)
	}
}

// Dead letters that cannot be requeued (truncated) are reported and
// stepped over: they do not stop a bulk requeue of the letters after them.
func TestHandler_BulkRequeueStepsOverFailures(t *testing.T) {
	fx := setup(t, "")
	bad := make([]stores.Record, 3)
	for i := range bad {
		bad[i] = stores.Record{Session: "plant", Route: "alarms", CreatedAt: t0, State: stores.Dead, Truncated: true,
			DeadReason: "payload_too_large", DeadAt: t0.Add(-time.Hour), Envelope: message.Envelope{ID: message.NewID(), Topic: "line/7"}}
	}
	if err := fx.st.Write(t.Context(), &stores.Batch{Append: bad}); err != nil {
		t.Fatal(err)
	}
	deadLetters(t, fx.st, "alarms", 4, []byte("x"))
	done, failed := 0, 0
	for _, s := range fx.bulkAll(t, "requeue", "alarms", 2, func() {}) {
		done, failed = done+s.Done, failed+len(s.Failed)
	}
	if done != 4 || failed != 3 {
		t.Errorf("bulk requeue behind 3 truncated letters: %d done, %d failed; want 4 and 3", done, failed)
	}
}

// Two requeues of one dead letter at once (two operators, or the console
// and the CLI): one wins, the other is told it is gone, and the outbox holds
// one new record.
func TestHandler_RacingRequeuesMakeOneRecord(t *testing.T) {
	fx := setup(t, "")
	id := deadLetters(t, fx.st, "alarms", 1, []byte("x"))[0]
	codes := make(chan int, 2)
	for range 2 {
		go func() {
			code, _ := fx.do(t, "POST", "/api/dead-letters/"+id+"/requeue", local, "X-Requested-By", "t")
			codes <- code
		}()
	}
	a, b := <-codes, <-codes
	if min(a, b) != http.StatusOK || max(a, b) != http.StatusNotFound {
		t.Errorf("racing requeues answered %d and %d, want 200 and 404", a, b)
	}
	st, err := fx.st.Stats(t.Context())
	if err != nil || len(st) != 1 || st[0].Live != 1 || st[0].Routes["alarms"].Dead != 0 {
		t.Errorf("after racing requeues: %+v, %v; want one live record and no dead letter", st, err)
	}
}

// One message that two routes dead-lettered is two dead letters with one
// envelope ID. Each is addressed by ID and route: a bulk action on one
// route acts on that route's letter, never the other's; a single-letter
// call without ?of= is refused, naming both routes; with it, it acts on
// that route's letter.
func TestHandler_ALetterIsItsIDAndRoute(t *testing.T) {
	fx := setup(t, "")
	id := message.NewID()
	var recs []stores.Record
	for i, route := range []string{"other", "alarms", "third"} { // other's died first
		recs = append(recs, stores.Record{Session: "plant", Route: route, CreatedAt: t0, State: stores.Dead,
			DeadReason: "permanent: http 422", DeadAt: t0.Add(time.Duration(i) * time.Second),
			Envelope: message.Envelope{ID: id, Topic: "line/7", Payload: []byte("x")}})
	}
	if err := fx.st.Write(t.Context(), &stores.Batch{Append: recs}); err != nil {
		t.Fatal(err)
	}
	fx.bulkAll(t, "requeue", "alarms", 10, func() {})
	for _, c := range []struct{ method, path string }{
		{"GET", "/api/dead-letters/" + id},
		{"POST", "/api/dead-letters/" + id + "/drop"},
		{"POST", "/api/dead-letters/" + id + "/requeue"},
	} {
		if code, body := fx.do(t, c.method, c.path, local, "X-Requested-By", "t"); code != http.StatusBadRequest ||
			!strings.Contains(body, "other, third") {
			t.Errorf("%s %s without ?of=: %d %s, want 400 naming the routes", c.method, c.path, code, body)
		}
	}
	if code, body := fx.do(t, "POST", "/api/dead-letters/"+id+"/drop?of=third", local, "X-Requested-By", "t"); code != http.StatusOK {
		t.Fatalf("drop ?of=third: %d %s", code, body)
	}
	if code, body := fx.do(t, "GET", "/api/dead-letters/"+id, local); code != http.StatusOK || !strings.Contains(body, `"route":"other"`) {
		t.Errorf("GET after the others went: %d %s, want other's letter", code, body)
	}
	for route, want := range map[string]int{"alarms": 0, "other": 1, "third": 0} {
		dead, _, err := fx.st.Dead(t.Context(), stores.DeadQuery{Route: route})
		if err != nil || len(dead) != want {
			t.Errorf("route %s has %d dead letters (%v), want %d", route, len(dead), err, want)
		}
	}
}

// Listing a page reads no payload: a page of MaxPage dead letters of
// 256 KiB (max_payload_bytes' default), 50 MiB of payloads in a real SQLite
// file, costs the call far less than one copy of them in Go allocations,
// and still reports each payload's size; showing one letter returns it.
func TestHandler_ListReadsNoPayloads(t *testing.T) {
	fx := setup(t, "")
	const size = 256 << 10
	ids := deadLetters(t, fx.st, "alarms", admin.MaxPage, []byte(strings.Repeat("p", size)))
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	code, body := fx.do(t, "GET", "/api/dead-letters?route=alarms&limit="+itoa(admin.MaxPage), local)
	runtime.ReadMemStats(&after)
	var page admin.DeadPage
	if code != http.StatusOK || json.Unmarshal([]byte(body), &page) != nil || len(page.DeadLetters) != admin.MaxPage {
		t.Fatalf("list: %d, %d letters", code, len(page.DeadLetters))
	}
	for _, d := range page.DeadLetters {
		if d.PayloadBytes != size || d.Payload != "" {
			t.Fatalf("listed letter %s: payload_bytes %d, payload %d bytes; want %d and none", d.ID, d.PayloadBytes, len(d.Payload), size)
		}
	}
	alloc := after.TotalAlloc - before.TotalAlloc
	t.Logf("listing %d letters of %d KiB allocated %.1f MiB", admin.MaxPage, size>>10, float64(alloc)/(1<<20))
	if alloc > admin.MaxPage*size/16 {
		t.Errorf("listing %d letters of %d KiB allocated %d bytes, want under %d: the payloads were read",
			admin.MaxPage, size>>10, alloc, admin.MaxPage*size/16)
	}
	var d admin.DeadLetter
	if code, body := fx.do(t, "GET", "/api/dead-letters/"+ids[7], local); code != http.StatusOK ||
		json.Unmarshal([]byte(body), &d) != nil || len(d.Payload) != size || d.PayloadBytes != size {
		t.Errorf("show %s: %d, payload %d bytes, payload_bytes %d; want %d", ids[7], code, len(d.Payload), d.PayloadBytes, size)
	}
}
