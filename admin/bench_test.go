package admin_test

import (
	"encoding/json"
	"net/http/httptest"
	"testing"

	"github.com/gobridge/gobridge/admin"
)

// BenchmarkHandler_DeadLetterPage serves one page of 50 dead letters out of
// 100,000 in SQLite, at the start and deep in the list (by cursor), and the
// per-route stats over them.
func BenchmarkHandler_DeadLetterPage(b *testing.B) {
	st := openStore(b)
	deadLetters(b, st, "alarms", 100_000, []byte(`{"temp": 21}`))
	h := admin.New(admin.Options{Store: storeOutbox{st}})
	// The cursor 99,000 records in.
	deep := ""
	for range 99_000 / admin.MaxPage {
		req := httptest.NewRequest("GET", "http://127.0.0.1/api/dead-letters?route=alarms&limit="+itoa(admin.MaxPage)+"&after="+deep, nil)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		var p struct{ Next string }
		_ = json.Unmarshal(rec.Body.Bytes(), &p)
		deep = p.Next
	}
	for name, target := range map[string]string{
		"first": "/api/dead-letters?route=alarms&limit=50",
		"deep":  "/api/dead-letters?route=alarms&limit=50&after=" + deep,
		"stats": "/api/stats", // outbox stats: reads every dead row
	} {
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				req := httptest.NewRequest("GET", "http://127.0.0.1"+target, nil)
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, req)
				if rec.Code != 200 {
					b.Fatalf("%d %s", rec.Code, rec.Body)
				}
			}
		})
	}
}
