package admin_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/gobridge/gobridge/admin"
	"github.com/gobridge/gobridge/drainer"
	"github.com/gobridge/gobridge/stores/memory"
)

// FuzzHandler sends arbitrary paths and queries to the API: it must answer
// with a known status and never panic.
func FuzzHandler(f *testing.F) {
	st := memory.New(memory.Options{})
	f.Cleanup(func() { _ = st.Close() })
	ids := deadLetters(f, st, "alarms", 3, []byte{0xff, 'x'})
	j := admin.NewJournal(5)
	j.Delivered(drainer.Outcome{Session: "plant", Route: "alarms", ID: "x", Result: "ok"})
	h := admin.New(admin.Options{Store: storeOutbox{st}, Journal: j})
	for _, seed := range []string{
		"/api/dead-letters?limit=10&route=alarms", "/api/dead-letters?after=1.2", "/api/dead-letters?limit=-1",
		"/api/dead-letters/" + ids[0], "/api/dead-letters/" + ids[1] + "/requeue", "/api/dead-letters/requeue?route=alarms&limit=1",
		"/api/journal?limit=99999999999999999999", "/api/overview", "/api/stats", "/console", "/api/%2e%2e/x",
	} {
		f.Add("GET", seed)
		f.Add("POST", seed)
	}
	f.Fuzz(func(t *testing.T, method, target string) {
		switch method {
		case "GET", "POST", "DELETE", "PUT":
		default:
			method = "GET"
		}
		req, err := http.NewRequest(method, "http://127.0.0.1"+target, nil)
		if err != nil {
			return
		}
		req.RemoteAddr = "127.0.0.1:1"
		req.Header.Set("X-Requested-By", "fuzz")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		switch rec.Code {
		case 200, 301, 307, 308, 400, 404, 405, 421, 501:
		default:
			t.Fatalf("%s %s: status %d: %s", method, target, rec.Code, rec.Body)
		}
	})
}
