package admin_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gobridge/gobridge/admin"
	"github.com/gobridge/gobridge/message"
	"github.com/gobridge/gobridge/stores"
	"github.com/gobridge/gobridge/stores/sqlite"
)

var t0 = time.Date(2026, 5, 6, 7, 8, 9, 0, time.UTC)

func openStore(t testing.TB) *sqlite.Store {
	t.Helper()
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "outbox.db"), sqlite.Options{Sync: "normal"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

// deadLetters appends n dead letters of route in session "plant", DeadAt
// one millisecond apart from t0; it returns their IDs in list order.
func deadLetters(t testing.TB, st stores.Store, route string, n int, payload []byte) []string {
	t.Helper()
	ids := make([]string, 0, n)
	for done := 0; done < n; {
		k := min(1000, n-done)
		recs := make([]stores.Record, k)
		for i := range recs {
			recs[i] = stores.Record{Session: "plant", Route: route, CreatedAt: t0, State: stores.Dead,
				DeadReason: "permanent: http 422: unprocessable", DeadAt: t0.Add(time.Duration(done+i) * time.Millisecond),
				Envelope: message.Envelope{ID: message.NewID(), Topic: "line/7", Payload: payload, QoS: 1}}
			ids = append(ids, recs[i].Envelope.ID)
		}
		if err := st.Write(t.Context(), &stores.Batch{Append: recs}); err != nil {
			t.Fatal(err)
		}
		done += k
	}
	return ids
}

// storeOutbox is the admin.Outbox of a store that the test uses directly
// (as the CLI does when no bridge runs): every route lives in "plant".
type storeOutbox struct{ stores.Store }

func (o storeOutbox) Requeue(ctx context.Context, id, of, to string) (stores.Record, error) {
	return stores.Requeue(ctx, o.Store, id, of, to, func(string) (string, int, error) { return "plant", 1, nil }, time.Now())
}

func (o storeOutbox) Drop(ctx context.Context, id, of string) error {
	return stores.DropDead(ctx, o.Store, id, of)
}

func getDead(t testing.TB, st stores.Store, id string) (stores.Record, error) {
	t.Helper()
	recs, _, err := st.Dead(t.Context(), stores.DeadQuery{ID: id})
	if err != nil {
		return stores.Record{}, err
	}
	return recs[0], nil
}

type fixture struct {
	h  *admin.Handler
	st *sqlite.Store
}

func setup(t *testing.T, token string) *fixture {
	t.Helper()
	fx := &fixture{st: openStore(t)}
	j := admin.NewJournal(0)
	j.Register("plant", "alarms")
	fx.h = admin.New(admin.Options{Store: storeOutbox{fx.st}, Journal: j, Token: token})
	return fx
}

// do serves one request from remote with the given headers (name, value
// pairs) and returns the status and body.
func (fx *fixture) do(t *testing.T, method, path, remote string, headers ...string) (int, string) {
	t.Helper()
	req := httptest.NewRequestWithContext(t.Context(), method, path, nil)
	req.RemoteAddr = remote
	req.Host = "127.0.0.1:9090"
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	rec := httptest.NewRecorder()
	fx.h.ServeHTTP(rec, req)
	b, _ := io.ReadAll(rec.Result().Body)
	return rec.Code, string(b)
}

const (
	local  = "127.0.0.1:50000"
	remote = "10.1.2.3:50000"
)

func TestHandler_WithoutTokenReadsAreOpen(t *testing.T) {
	fx := setup(t, "")
	id := deadLetters(t, fx.st, "alarms", 1, []byte("hello"))[0]
	for _, path := range []string{"/api/overview", "/api/sessions", "/api/routes", "/api/stats", "/api/journal",
		"/api/dead-letters", "/api/dead-letters/" + id, "/console"} {
		if code, body := fx.do(t, "GET", path, remote); code != http.StatusOK {
			t.Errorf("GET %s from a remote client, no token configured: %d %s", path, code, body)
		}
	}
	code, body := fx.do(t, "GET", "/api/dead-letters/"+id, remote)
	var d admin.DeadLetter
	if code != 200 || json.Unmarshal([]byte(body), &d) != nil || d.Payload != "hello" || d.PayloadEncoding != "text" || d.Reason == "" {
		t.Errorf("get = %d %s", code, body)
	}
	if code, _ := fx.do(t, "GET", "/api/dead-letters/nope", remote); code != http.StatusNotFound {
		t.Errorf("missing dead letter: %d", code)
	}
	if code, _ := fx.do(t, "GET", "/api/dead-letters?after=garbage", remote); code != http.StatusBadRequest {
		t.Errorf("bad cursor: %d", code)
	}
	if code, _ := fx.do(t, "GET", "/api/nothing", remote); code != http.StatusNotFound {
		t.Errorf("unknown endpoint: %d", code)
	}
}

func TestHandler_MutationsNeedTheToken(t *testing.T) {
	fx := setup(t, "s3cret")
	ids := deadLetters(t, fx.st, "alarms", 3, []byte("x"))
	for _, auth := range []string{"", "Bearer wrong", "s3cret", "Basic s3cret"} {
		for _, from := range []string{local, remote} {
			code, _ := fx.do(t, "POST", "/api/dead-letters/"+ids[0]+"/requeue", from, "Authorization", auth, "X-Requested-By", "test")
			if code != http.StatusUnauthorized {
				t.Errorf("requeue with Authorization %q from %s: %d, want 401", auth, from, code)
			}
		}
	}
	if _, err := getDead(t, fx.st, ids[0]); err != nil {
		t.Fatalf("refused requeue changed the store: %v", err)
	}
	code, body := fx.do(t, "POST", "/api/dead-letters/"+ids[0]+"/requeue", remote, "Authorization", "Bearer s3cret")
	if code != http.StatusOK || !strings.Contains(body, `"requeued":"`+ids[0]) {
		t.Fatalf("requeue with token: %d %s", code, body)
	}
	if code, _ := fx.do(t, "DELETE", "/api/dead-letters/"+ids[1], remote, "Authorization", "Bearer s3cret"); code != http.StatusOK {
		t.Errorf("drop with token: %d", code)
	}
	if code, _ := fx.do(t, "POST", "/api/dead-letters/"+ids[1]+"/drop", remote, "Authorization", "Bearer s3cret"); code != http.StatusNotFound {
		t.Errorf("second drop: %d, want 404", code)
	}
	left, _, _ := fx.st.Dead(t.Context(), stores.DeadQuery{})
	if len(left) != 1 || left[0].Envelope.ID != ids[2] {
		t.Errorf("left = %d records", len(left))
	}
}

func TestHandler_WithoutTokenOnlyLoopbackMutates(t *testing.T) {
	fx := setup(t, "")
	ids := deadLetters(t, fx.st, "alarms", 2, []byte("x"))
	if code, _ := fx.do(t, "POST", "/api/dead-letters/"+ids[0]+"/drop", remote, "X-Requested-By", "test"); code != http.StatusForbidden {
		t.Errorf("drop from a remote client: %d, want 403", code)
	}
	if code, _ := fx.do(t, "POST", "/api/dead-letters/"+ids[0]+"/drop", local); code != http.StatusForbidden {
		t.Errorf("drop from loopback without X-Requested-By (a cross-site form): %d, want 403", code)
	}
	if code, _ := fx.do(t, "POST", "/api/dead-letters/"+ids[0]+"/drop", "[::1]:4000", "X-Requested-By", "test"); code != http.StatusOK {
		t.Errorf("drop from ::1: %d, want 200", code)
	}
	if code, _ := fx.do(t, "POST", "/api/dead-letters/"+ids[1]+"/requeue", local, "X-Requested-By", "test"); code != http.StatusOK {
		t.Errorf("requeue from loopback: %d, want 200", code)
	}
}

// An empty ID makes a path the router would redirect to its clean form,
// which is another endpoint: /api/dead-letters//requeue?route=R is the bulk
// requeue of R once cleaned. It is refused instead.
func TestHandler_RefusesPathsThatAreNotClean(t *testing.T) {
	fx := setup(t, "")
	deadLetters(t, fx.st, "alarms", 2, []byte("x"))
	for _, p := range []string{"/api/dead-letters//requeue?route=alarms", "/api/dead-letters//drop?route=alarms",
		"/api/dead-letters/x/../requeue?route=alarms", "/api//overview"} {
		if code, _ := fx.do(t, "POST", p, local, "X-Requested-By", "test"); code != http.StatusNotFound {
			t.Errorf("POST %s: %d, want 404", p, code)
		}
	}
	if left, _, err := fx.st.Dead(t.Context(), stores.DeadQuery{}); err != nil || len(left) != 2 {
		t.Errorf("%d dead letters left (%v), want both", len(left), err)
	}
	if code, _ := fx.do(t, "GET", "/console/", local); code != http.StatusOK {
		t.Errorf("GET /console/: %d, want 200", code)
	}
}

// An ID is one path segment, with its slashes escaped (%2F): an ID from an
// idempotency_key template ("{topic}" with an empty level, a path) that
// holds "//" or a dot segment is still a clean path, and is served. The
// check read the unescaped path, so such a letter could not be shown,
// requeued or dropped through the API (the console, `gobridge dlq` next to
// a running bridge): 404 "no such admin endpoint".
func TestHandler_IDsWithSlashesAndDotsAreServed(t *testing.T) {
	fx := setup(t, "")
	for _, id := range []string{"plant//7", "a/./b", "a/..", "../x"} {
		dl := stores.Record{Session: "plant", Route: "alarms", CreatedAt: t0, State: stores.Dead, DeadReason: "422", DeadAt: t0,
			Envelope: message.Envelope{ID: id, Topic: "line/7", Payload: []byte("x")}}
		if err := fx.st.Write(t.Context(), &stores.Batch{Append: []stores.Record{dl}}); err != nil {
			t.Fatal(err)
		}
		p := "/api/dead-letters/" + url.PathEscape(id)
		if code, body := fx.do(t, "GET", p, local); code != http.StatusOK {
			t.Errorf("GET %s: %d %s, want 200", p, code, body)
		}
		if code, body := fx.do(t, "POST", p+"/drop", local, "X-Requested-By", "test"); code != http.StatusOK {
			t.Errorf("POST %s/drop: %d %s, want 200", p, code, body)
		}
	}
	if left, _, err := fx.st.Dead(t.Context(), stores.DeadQuery{}); err != nil || len(left) != 0 {
		t.Errorf("%d dead letters left (%v), want none", len(left), err)
	}
}

func TestHandler_PagesTenThousandDeadLetters(t *testing.T) {
	fx := setup(t, "")
	n := 10_000
	if testing.Short() {
		n = 2_000
	}
	start := time.Now()
	ids := deadLetters(t, fx.st, "alarms", n, []byte(strings.Repeat("p", 2000)))
	deadLetters(t, fx.st, "other", 10, []byte("x"))
	t.Logf("created %d dead letters in %v", n, time.Since(start))
	var got []string
	after, pages, biggest := "", 0, 0
	for {
		code, body := fx.do(t, "GET", "/api/dead-letters?route=alarms&limit="+itoa(admin.MaxPage)+"&after="+after, remote)
		if code != http.StatusOK {
			t.Fatalf("page %d: %d %s", pages, code, body)
		}
		biggest = max(biggest, len(body))
		var p struct {
			DeadLetters []admin.DeadLetter `json:"dead_letters"`
			Next        string             `json:"next"`
		}
		if err := json.Unmarshal([]byte(body), &p); err != nil {
			t.Fatal(err)
		}
		for _, d := range p.DeadLetters {
			got = append(got, d.ID)
			if d.Payload != "" || d.Route != "alarms" {
				t.Fatalf("list row with payload or of another route: %+v", d)
			}
		}
		pages++
		if p.Next == "" {
			break
		}
		after = p.Next
	}
	if len(got) != n || pages != n/admin.MaxPage {
		t.Fatalf("paged %d IDs in %d pages, want %d in %d", len(got), pages, n, n/admin.MaxPage)
	}
	for i := range got {
		if got[i] != ids[i] {
			t.Fatalf("ID %d = %s, want %s (oldest first)", i, got[i], ids[i])
		}
	}
	// A page never carries payloads: MaxPage rows of 2 kB payload stay small.
	if biggest > 300_000 {
		t.Errorf("largest page is %d bytes", biggest)
	}
	if code, _ := fx.do(t, "GET", "/api/dead-letters?limit="+itoa(admin.MaxPage+1), remote); code != http.StatusBadRequest {
		t.Errorf("limit above %d: %d, want 400", admin.MaxPage, code)
	}

	t.Run("bulk requeue works in bounded steps", func(t *testing.T) {
		code, body := fx.do(t, "POST", "/api/dead-letters/requeue?route=other&limit=4", local, "X-Requested-By", "t")
		if code != 200 || !strings.Contains(body, `"done":4`) || !strings.Contains(body, `"remaining":true`) {
			t.Fatalf("first step: %d %s", code, body)
		}
		code, body = fx.do(t, "POST", "/api/dead-letters/drop?route=other", local, "X-Requested-By", "t")
		if code != 200 || !strings.Contains(body, `"done":6`) || !strings.Contains(body, `"remaining":false`) {
			t.Fatalf("drop the rest: %d %s", code, body)
		}
		if code, _ := fx.do(t, "POST", "/api/dead-letters/drop", local, "X-Requested-By", "t"); code != http.StatusBadRequest {
			t.Errorf("bulk without route: %d, want 400", code)
		}
	})
}

func TestHandler_NoStore(t *testing.T) {
	h := admin.New(admin.Options{})
	req := httptest.NewRequestWithContext(t.Context(), "GET", "http://localhost/api/dead-letters", nil)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusNotFound || !strings.Contains(rec.Body.String(), "no outbox store") {
		t.Errorf("dead letters without a store: %d %s", rec.Code, rec.Body)
	}
}

// When the store cannot count what is pending, the overview says so rather
// than showing every session empty.
func TestHandler_OverviewSaysWhenTheStoreFails(t *testing.T) {
	fx := setup(t, "")
	for _, path := range []string{"/api/overview", "/api/sessions"} {
		if _, body := fx.do(t, "GET", path, local); strings.Contains(body, "store_error") {
			t.Fatalf("%s with a working store: %s", path, body)
		}
	}
	if err := fx.st.Close(); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"/api/overview", "/api/sessions"} {
		code, body := fx.do(t, "GET", path, local)
		var got struct {
			Sessions   []admin.SessionInfo `json:"sessions"`
			StoreError string              `json:"store_error"`
		}
		if err := json.Unmarshal([]byte(body), &got); err != nil || code != http.StatusOK {
			t.Fatalf("%s: %d %s (%v)", path, code, body, err)
		}
		if !strings.Contains(got.StoreError, "outbox counts unavailable") || len(got.Sessions) != 1 || got.Sessions[0].ID != "plant" {
			t.Errorf("%s with a closed store: %s; want the session listed and store_error set", path, body)
		}
	}
}
