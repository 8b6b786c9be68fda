package admin_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/gobridge/gobridge/admin"
	"github.com/gobridge/gobridge/drainer"
)

func TestJournal_KeepsTheLastOutcomesPerRoute(t *testing.T) {
	j := admin.NewJournal(0)
	now := time.Now()
	for i := range 1000 {
		res := drainer.ResultOK
		if i%10 == 0 {
			res = drainer.ResultTransient
		}
		j.Delivered(drainer.Outcome{Session: "s", Route: "a", ID: fmt.Sprint("a-", i), Result: res, Attempt: 1,
			Err: strings.Repeat("e", 10_000), Latency: 3 * time.Millisecond, At: now.Add(time.Duration(i-1000) * time.Millisecond)})
	}
	j.Delivered(drainer.Outcome{Session: "s", Route: "b", ID: "b-0", Result: drainer.ResultDeadLettered, At: now})
	a := j.Entries("a", 0)
	if len(a) != admin.DefaultJournalSize || a[0].ID != "a-999" || a[len(a)-1].ID != "a-700" {
		t.Fatalf("route a: %d entries, newest %s, oldest %s", len(a), a[0].ID, a[len(a)-1].ID)
	}
	if len(a[0].Error) > 600 || a[0].LatencyMS != 3 {
		t.Errorf("entry = error of %d bytes, latency %v", len(a[0].Error), a[0].LatencyMS)
	}
	if all := j.Entries("", 5); len(all) != 5 || all[0].ID != "b-0" {
		t.Errorf("all routes, newest first: %+v", all)
	}
	b, _ := json.Marshal(a[0])
	if strings.Contains(string(b), "payload") {
		t.Errorf("journal entry has a payload field: %s", b)
	}
	j.Limit("a", 17)
	j.InFlight("a", 4)
	rs := j.Routes()
	if len(rs) != 2 || rs[0].Route != "a" || rs[0].Limit != 17 || rs[0].InFlight != 4 || rs[0].Totals["ok"] != 900 || rs[0].Totals["transient"] != 100 {
		t.Fatalf("routes = %+v", rs)
	}
	var ok, failed int
	for _, p := range rs[0].Throughput {
		ok, failed = ok+p.OK, failed+p.Failed
	}
	if len(rs[0].Throughput) != admin.Buckets || ok != 900 || failed != 100 {
		t.Errorf("throughput: %d buckets, ok %d, failed %d", len(rs[0].Throughput), ok, failed)
	}
	if rs[0].OKPerSecond != 15 {
		t.Errorf("ok per second over the last minute = %v, want 900/60", rs[0].OKPerSecond)
	}
}

func TestJournal_SenderStateIsRedacted(t *testing.T) {
	j := admin.NewJournal(0)
	j.SenderState("hook", false, "http: POST https://plant:hunter2@hooks.example/in?token=abc123: status 503"+strings.Repeat("é", 400))
	s := j.Senders()
	if len(s) != 1 || s[0].Up || strings.Contains(s[0].LastError, "hunter2") || strings.Contains(s[0].LastError, "abc123") {
		t.Fatalf("senders = %+v", s)
	}
	if len(s[0].LastError) > 600 || !utf8.ValidString(s[0].LastError) {
		t.Fatalf("last error not cut at a character boundary within the limit: %d bytes", len(s[0].LastError))
	}
}
