package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/gobridge/gobridge/message"
	"github.com/gobridge/gobridge/stores"
)

func TestOutbox_StatsPerRoute(t *testing.T) {
	fx := newStoreFixture(t, "sqlite")
	fillStats(t, fx)
	// alarms: recs[1] claimed, recs[2] pending due, recs[3] pending not due,
	// recs[0] done, two dead. telemetry: nothing (listed from the config).
	code, out, errOut := gobridge(t, "outbox", "stats", "-c", fx.cfg, "--format", "json")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var got struct {
		Routes []struct {
			stores.RouteStats
			OldestAgeSeconds float64 `json:"oldest_age_seconds"`
		} `json:"routes"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil || len(got.Routes) != 2 {
		t.Fatalf("json %v:\n%s", err, out)
	}
	a, tel := got.Routes[0], got.Routes[1]
	if a.Route != "alarms" || a.Pending != 2 || a.Claimed != 1 || a.Due != 1 || a.Dead != 2 || a.DoneLastHour != 1 {
		t.Errorf("alarms = %+v", a.RouteStats)
	}
	if a.OldestAgeSeconds < 8*60 || a.OldestAgeSeconds > 10*60 {
		t.Errorf("oldest age = %vs, want about 9m", a.OldestAgeSeconds)
	}
	if tel.Route != "telemetry" || tel.Session != "plant" || tel.Pending != 0 {
		t.Errorf("telemetry = %+v", tel.RouteStats)
	}
	code, out, _ = gobridge(t, "outbox", "stats", "-c", fx.cfg)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != exitOK || len(lines) != 3 || !strings.HasPrefix(lines[0], "SESSION") || !strings.Contains(lines[1], "alarms") {
		t.Fatalf("table: exit %d\n%s", code, out)
	}
	if f := strings.Fields(lines[1]); len(f) != 8 || f[2] != "2" || f[3] != "1" || f[4] != "1" || f[6] != "2" || f[7] != "1" {
		t.Errorf("alarms row = %q", lines[1])
	}
}

// fillStats gives route "alarms" of session "plant" one record of each kind
// that `outbox stats` counts: recs[0] done, recs[1] claimed, recs[2] pending
// and due, recs[3] pending and not due (the oldest live one is 9m old), and
// two dead letters.
func fillStats(t *testing.T, fx *storeFixture) {
	t.Helper()
	ctx := t.Context()
	now := time.Now()
	fx.dead(t, "alarms", 2, []byte(`x`), "boom", now.Add(-time.Hour))
	var recs []stores.Record
	for i := range 4 {
		next := now.Add(-time.Minute)
		if i == 3 {
			next = now.Add(time.Hour) // retrying later: pending, not due
		}
		recs = append(recs, stores.Record{Session: "plant", Route: "alarms", CreatedAt: now.Add(-time.Duration(10-i) * time.Minute),
			NextAttemptAt: next, Envelope: message.Envelope{ID: message.NewID(), Topic: "a/1", QoS: 1}})
	}
	if err := fx.st.Append(ctx, recs...); err != nil {
		t.Fatal(err)
	}
	c, err := fx.st.Claim(ctx, stores.ClaimRequest{Session: "plant", Token: 5, Limit: 2, Now: now, Until: now.Add(time.Minute)})
	if err != nil || len(c) != 2 {
		t.Fatalf("claim %d %v", len(c), err)
	}
	if err := fx.st.Complete(ctx, c[0]); err != nil {
		t.Fatal(err)
	}
}
