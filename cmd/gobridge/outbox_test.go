package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/gobridge/gobridge/admin"
	"github.com/gobridge/gobridge/message"
	"github.com/gobridge/gobridge/stores"
	"github.com/gobridge/gobridge/stores/sqlite"
)

func TestOutbox_StatsPerRoute(t *testing.T) {
	fx := newStoreFixture(t, "sqlite")
	fillStats(t, fx)
	code, out, errOut := gobridge(t, "outbox", "stats", "-c", fx.cfg, "--format", "json", "--sample", "0")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var got struct {
		Routes []admin.RouteStats `json:"routes"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil || len(got.Routes) != 3 {
		t.Fatalf("json %v:\n%s", err, out)
	}
	a, gone, tel := got.Routes[0], got.Routes[1], got.Routes[2]
	if a.Route != "alarms" || a.Live != 3 || a.Dead != 2 || a.Note != "" {
		t.Errorf("alarms = %+v", a)
	}
	if a.OldestAgeSeconds < 8*60 || a.OldestAgeSeconds > 10*60 {
		t.Errorf("oldest age = %vs, want about 9m", a.OldestAgeSeconds)
	}
	if gone.Route != "renamed" || gone.Live != 1 || !strings.Contains(gone.Note, "orphan") {
		t.Errorf("a route the config lacks = %+v, want it flagged as orphan", gone)
	}
	if tel.Route != "telemetry" || tel.Session != "plant" || tel.Live != 0 {
		t.Errorf("telemetry = %+v", tel)
	}
	code, out, _ = gobridge(t, "outbox", "stats", "-c", fx.cfg, "--sample", "0")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != exitOK || len(lines) != 4 || !strings.HasPrefix(lines[0], "SESSION") || !strings.Contains(lines[1], "alarms") {
		t.Fatalf("table: exit %d\n%s", code, out)
	}
	if f := strings.Fields(lines[1]); len(f) != 7 || f[2] != "3" || f[4] != "2" {
		t.Errorf("alarms row = %q", lines[1])
	}
	// A negative --sample is a mistake, as a negative dlq list --since is;
	// it was taken for 0 (one read, no rate), exit 0.
	if code, out, errOut := gobridge(t, "outbox", "stats", "-c", fx.cfg, "--sample", "-2s"); code != exitUsage || !strings.Contains(errOut, "--sample") {
		t.Errorf("--sample -2s: exit %d, want %d\n%s%s", code, exitUsage, out, errOut)
	}
}

// fillStats gives route "alarms" of session "plant" four records (one of
// them delivered: three live, the oldest live one 9m old) and two dead
// letters, and route "renamed", which the config lacks, one live record.
func fillStats(t *testing.T, fx *storeFixture) {
	t.Helper()
	now := time.Now()
	fx.dead(t, "alarms", 2, []byte(`x`), "boom", now.Add(-time.Hour))
	var recs []stores.Record
	for i := range 4 {
		recs = append(recs, stores.Record{Session: "plant", Route: "alarms", CreatedAt: now.Add(-time.Duration(10-i) * time.Minute),
			Envelope: message.Envelope{ID: message.NewID(), Topic: "a/1", QoS: 1}})
	}
	recs = append(recs, stores.Record{Session: "plant", Route: "renamed", CreatedAt: now,
		Envelope: message.Envelope{ID: message.NewID(), Topic: "a/1", QoS: 1}})
	fx.with(t, func(st stores.Store) {
		ctx := t.Context()
		if err := st.Write(ctx, &stores.Batch{Append: recs}); err != nil {
			t.Fatal(err)
		}
		le, err := st.Acquire(ctx, stores.PartitionLease("plant", 0), "test-"+message.NewID(), time.Minute, now)
		if err != nil {
			t.Fatal(err)
		}
		c, err := st.Claim(ctx, stores.ClaimRequest{Session: "plant", Token: le.Token, Limit: 1})
		if err != nil || len(c) != 1 {
			t.Fatalf("claim %d %v", len(c), err)
		}
		if err := st.Write(ctx, &stores.Batch{Settle: []stores.Settlement{{Key: c[0].Key(), Token: le.Token, Outcome: stores.Done}}}); err != nil {
			t.Fatal(err)
		}
	})
}

// A bridge (re)starting while `outbox stats` samples a stopped bridge's
// SQLite file must get the file: the command only reads, so it must not
// take the owner's lock (a monitoring job would otherwise make a restarting
// bridge fail with "owned by process").
func TestOutbox_StatsLeavesTheFileToABridgeThatStarts(t *testing.T) {
	fx := newStoreFixture(t, "sqlite")
	fillStats(t, fx)
	var openErr error
	afterFirstSample = func() {
		st, err := sqlite.Open(fx.db, sqlite.Options{Sync: "normal"}) // what a starting bridge does
		if openErr = err; err == nil {
			openErr = st.Close()
		}
	}
	t.Cleanup(func() { afterFirstSample = func() {} })
	if code, _, errOut := gobridge(t, "outbox", "stats", "-c", fx.cfg, "--sample", "1ms"); code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if openErr != nil {
		t.Fatalf("a bridge starting while outbox stats ran could not open its store: %v", openErr)
	}
}
