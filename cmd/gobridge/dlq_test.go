package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gobridge/gobridge/admin"
	"github.com/gobridge/gobridge/message"
	"github.com/gobridge/gobridge/stores"
)

func TestDLQ_ListPagesOldestFirst(t *testing.T) {
	fx := newStoreFixture(t, "sqlite")
	base := time.Now().Add(-time.Hour).Truncate(time.Second)
	ids := fx.dead(t, "alarms", 5, []byte(`{"t":1}`), "permanent: 400 bad request", base)
	fx.dead(t, "telemetry", 2, []byte(`{}`), "poisoned", base.Add(10*time.Second))

	code, out, errOut := gobridge(t, "dlq", "list", "-c", fx.cfg, "--route", "alarms", "--limit", "2")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "ID") || !strings.HasPrefix(lines[1], ids[0]) || !strings.HasPrefix(lines[2], ids[1]) {
		t.Fatalf("page 1:\n%s", out)
	}
	if !strings.Contains(lines[1], "permanent: 400 bad request") || !strings.Contains(lines[1], "alarms") {
		t.Errorf("row lacks reason or route: %q", lines[1])
	}
	_, cursor, ok := strings.Cut(strings.TrimSpace(errOut), "--after ")
	if !ok {
		t.Fatalf("no next cursor on stderr: %q", errOut)
	}
	code, out, _ = gobridge(t, "dlq", "list", "-c", fx.cfg, "--route", "alarms", "--limit", "2", "--after", cursor, "--format", "json")
	if code != exitOK {
		t.Fatalf("exit %d", code)
	}
	var page struct {
		DeadLetters []admin.DeadLetter `json:"dead_letters"`
		Next        string             `json:"next"`
	}
	if err := json.Unmarshal([]byte(out), &page); err != nil {
		t.Fatalf("json: %v\n%s", err, out)
	}
	if len(page.DeadLetters) != 2 || page.DeadLetters[0].ID != ids[2] || page.DeadLetters[1].ID != ids[3] || page.Next == "" {
		t.Fatalf("page 2 = %+v", page)
	}
	if d := page.DeadLetters[0]; d.Attempts != 1 || d.Reason != "permanent: 400 bad request" || d.Payload != "" {
		t.Errorf("page 2 row = %+v (list never includes payloads)", d)
	}

	t.Run("since skips older dead letters", func(t *testing.T) {
		// A fixed clock: with the wall clock, the time the command takes to
		// open the store would move the cutoff past ids[3] on a slow machine.
		now := time.Now()
		since := now.Sub(base.Add(2500 * time.Millisecond)) // cutoff between ids[2] and ids[3]
		var stdout, stderr bytes.Buffer
		cmd := &DLQCommand{Stdout: &stdout, Stderr: &stderr, Now: func() time.Time { return now }}
		if err := cmd.Run(t.Context(), []string{"list", "-c", fx.cfg, "--since", since.String(), "--format", "json", "--limit", "2"}); err != nil {
			t.Fatalf("dlq list: %v\n%s", err, stderr.String())
		}
		out := stdout.String()
		var p struct {
			DeadLetters []admin.DeadLetter `json:"dead_letters"`
		}
		if err := json.Unmarshal([]byte(out), &p); err != nil {
			t.Fatalf("json: %v\n%s", err, out)
		}
		if len(p.DeadLetters) == 0 || p.DeadLetters[0].ID != ids[3] {
			t.Fatalf("--since %s: %s", since, out)
		}
	})
}

func TestDLQ_ShowPrintsEverything(t *testing.T) {
	fx := newStoreFixture(t, "sqlite")
	base := time.Now().Add(-time.Minute)
	text := fx.dead(t, "alarms", 1, []byte(`{"temp": 21}`), "permanent: schema", base)[0]
	bin := fx.dead(t, "alarms", 1, []byte{0xff, 0x00, 0xfe}, "permanent: binary", base)[0]

	code, out, errOut := gobridge(t, "dlq", "show", "-c", fx.cfg, text)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{text, "plant", "alarms", "a/1", "permanent: schema", "header site:", "payload encoding:  text", `{"temp": 21}`} {
		if !strings.Contains(out, want) {
			t.Errorf("show lacks %q:\n%s", want, out)
		}
	}
	code, out, _ = gobridge(t, "dlq", "show", bin, "-c", fx.cfg, "--format", "json")
	var d admin.DeadLetter
	if code != exitOK || json.Unmarshal([]byte(out), &d) != nil {
		t.Fatalf("exit %d: %s", code, out)
	}
	if d.PayloadEncoding != "base64" || d.Payload != "/wD+" || d.Headers["site"] != "7" {
		t.Errorf("binary payload = %+v", d)
	}
	code, _, errOut = gobridge(t, "dlq", "show", "-c", fx.cfg, "no-such-id")
	if code != exitFailure || !strings.Contains(errOut, "not found") {
		t.Errorf("missing ID: exit %d, %q", code, errOut)
	}
}

func TestDLQ_RequeueAndDrop(t *testing.T) {
	fx := newStoreFixture(t, "sqlite")
	base := time.Now().Add(-time.Minute)
	ids := fx.dead(t, "alarms", 3, []byte(`x`), "boom", base)
	tele := fx.dead(t, "telemetry", 2, []byte(`y`), "boom", base)

	code, out, errOut := gobridge(t, "dlq", "requeue", "-c", fx.cfg, ids[0])
	if code != exitOK || !strings.Contains(out, "requeued "+ids[0]+" as ") {
		t.Fatalf("requeue: exit %d\n%s%s", code, out, errOut)
	}
	if _, err := fx.getDead(t, ids[0]); !errors.Is(err, stores.ErrNotFound) {
		t.Errorf("requeued dead letter still there: %v", err)
	}
	fx.with(t, func(st stores.Store) {
		le, err := st.Acquire(t.Context(), stores.PartitionLease("plant", 0), "test", time.Minute, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		got, err := st.Claim(t.Context(), stores.ClaimRequest{Session: "plant", Token: le.Token, Limit: 10})
		if err != nil || len(got) != 1 || got[0].CausationID != ids[0] || got[0].Attempts != 0 {
			t.Fatalf("requeued record: %+v, %v", got, err)
		}
	})

	code, out, _ = gobridge(t, "dlq", "drop", "-c", fx.cfg, ids[1], "missing-id")
	if code != exitFailure || !strings.Contains(out, "dropped "+ids[1]) {
		t.Errorf("drop with one missing ID: exit %d\n%s", code, out)
	}

	// Bulk without --yes only prints.
	code, out, _ = gobridge(t, "dlq", "drop", "-c", fx.cfg, "--route", "telemetry", "--all")
	if code != exitOK || !strings.Contains(out, "would drop 2 dead letters of route telemetry") || !strings.Contains(out, tele[1]) {
		t.Fatalf("dry run: exit %d\n%s", code, out)
	}
	if recs := fx.listDead(t, "telemetry"); len(recs) != 2 {
		t.Fatalf("dry run changed something: %d left", len(recs))
	}
	code, out, _ = gobridge(t, "dlq", "requeue", "-c", fx.cfg, "--route", "telemetry", "--all", "--yes")
	if code != exitOK || !strings.Contains(out, "requeued 2 of 2") {
		t.Fatalf("bulk requeue: exit %d\n%s", code, out)
	}
	left := fx.listDead(t, "")
	if len(left) != 1 || left[0].Envelope.ID != ids[2] {
		t.Fatalf("left after bulk requeue: %d", len(left))
	}
}

// TestDLQ_ALetterIsItsIDAndRoute: one message two routes dead-lettered is
// a letter on each with the same ID. An ID alone that names both is
// refused (it used to act on whichever the store listed first, another
// route's letter included); --route names the one meant; --all takes each
// letter by its route.
func TestDLQ_ALetterIsItsIDAndRoute(t *testing.T) {
	fx := newStoreFixture(t, "sqlite")
	base := time.Now().Add(-time.Minute)
	id := fx.dead(t, "alarms", 1, []byte(`x`), "boom", base)[0]
	fx.with(t, func(st stores.Store) {
		d := stores.Record{Session: "plant", Route: "telemetry", CreatedAt: base, State: stores.Dead, DeadReason: "boom",
			DeadAt: base.Add(time.Second), Envelope: message.Envelope{ID: id, Topic: "t/1", Payload: []byte(`x`)}}
		if err := st.Write(t.Context(), &stores.Batch{Append: []stores.Record{d}}); err != nil {
			t.Fatal(err)
		}
	})
	for _, verb := range []string{"show", "drop", "requeue"} {
		if code, out, errOut := gobridge(t, "dlq", verb, "-c", fx.cfg, id); code != exitFailure || !strings.Contains(errOut, "alarms, telemetry") {
			t.Errorf("dlq %s ID naming two letters: exit %d\n%s%s", verb, code, out, errOut)
		}
	}
	if code, out, errOut := gobridge(t, "dlq", "drop", "-c", fx.cfg, "--route", "telemetry", id); code != exitOK {
		t.Fatalf("drop --route telemetry: exit %d\n%s%s", code, out, errOut)
	}
	if left := fx.listDead(t, ""); len(left) != 1 || left[0].Route != "alarms" {
		t.Fatalf("left after dropping telemetry's letter: %+v", left)
	}
}

// TestDLQ_EmptyIDTouchesNothing checks that an empty ID (an unset shell
// variable: dlq drop "$ID") is a usage error. A store's query by an empty
// ID is no ID query at all: it answered the oldest dead letter of any
// route, which drop then dropped and requeue requeued (and with no dead
// letter, the command panicked).
func TestDLQ_EmptyIDTouchesNothing(t *testing.T) {
	fx := newStoreFixture(t, "sqlite")
	ids := fx.dead(t, "alarms", 2, []byte(`x`), "boom", time.Now().Add(-time.Minute))
	for _, args := range [][]string{
		{"dlq", "drop", "-c", fx.cfg, ""},
		{"dlq", "requeue", "-c", fx.cfg, ids[1], ""},
		{"dlq", "show", "-c", fx.cfg, ""},
	} {
		if code, out, _ := gobridge(t, args...); code != exitUsage {
			t.Errorf("%q: exit %d, want %d\n%s", args, code, exitUsage, out)
		}
	}
	if left := fx.listDead(t, ""); len(left) != 2 {
		t.Errorf("%d dead letters left, want both", len(left))
	}
}

// TestDLQ_AMissingOutboxFileIsNeverCreated: a SQLite outbox that does not
// exist (a wrong path, a relative path from another directory) is an error
// naming it, for every command. requeue and drop created an empty outbox
// there (and its lock file), then answered "stores: not found" (or, with
// --all, "0 dead letters", exit 0), as if the ID were wrong.
func TestDLQ_AMissingOutboxFileIsNeverCreated(t *testing.T) {
	fx := newStoreFixture(t, "sqlite")
	for _, args := range [][]string{{"dlq", "list"}, {"dlq", "show", "x"}, {"dlq", "requeue", "x"}, {"dlq", "drop", "x"},
		{"dlq", "requeue", "--all"}, {"dlq", "drop", "--all", "--yes"}, {"outbox", "stats", "--sample", "0"}} {
		code, out, errOut := gobridge(t, append(args, "-c", fx.cfg)...)
		if code != exitFailure || !strings.Contains(errOut, fx.db) || !strings.Contains(errOut, "does not exist") {
			t.Errorf("%v: exit %d, want %d and the missing file named\n%s%s", args, code, exitFailure, out, errOut)
		}
		for _, f := range []string{fx.db, fx.db + ".lock"} {
			if _, err := os.Stat(f); !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("%v made %s (%v)", args, f, err)
			}
		}
	}
}

func TestDLQ_UsageAndStoreErrors(t *testing.T) {
	fx := newStoreFixture(t, "sqlite")
	for _, args := range [][]string{
		{"dlq"},
		{"dlq", "nope"},
		{"dlq", "list"},
		{"dlq", "list", "-c", fx.cfg, "--limit", "0"},
		{"dlq", "list", "-c", fx.cfg, "--format", "xml"},
		{"dlq", "show", "-c", fx.cfg},
		{"dlq", "requeue", "-c", fx.cfg},
		{"dlq", "drop", "-c", fx.cfg, "--all", "some-id"},
		{"dlq", "drop", "-c", fx.cfg, "--to-route", "alarms", "some-id"},
		{"outbox"},
		{"outbox", "stats"},
		{"outbox", "stats", "-c", fx.cfg, "--format", "yaml"},
	} {
		if code, _, _ := gobridge(t, args...); code != exitUsage {
			t.Errorf("%v: exit %d, want %d", args, code, exitUsage)
		}
	}
	for _, args := range [][]string{{"dlq", "-h"}, {"dlq", "list", "-h"}, {"outbox", "stats", "-h"}, {"outbox", "help"}} {
		if code, _, _ := gobridge(t, args...); code != exitOK {
			t.Errorf("%v: exit %d, want 0", args, code)
		}
	}
	// Each command lists only the flags it takes (--to-route is requeue's).
	if _, out, errOut := gobridge(t, "dlq", "drop", "-h"); strings.Contains(out+errOut, "-to-route ROUTE") {
		t.Errorf("dlq drop -h lists --to-route, which drop refuses:\n%s%s", out, errOut)
	}
	if _, out, errOut := gobridge(t, "dlq", "requeue", "-h"); !strings.Contains(out+errOut, "-to-route ROUTE") {
		t.Errorf("dlq requeue -h does not list --to-route:\n%s%s", out, errOut)
	}
	mem := newStoreFixture(t, "memory")
	for _, args := range [][]string{{"dlq", "list", "-c", mem.cfg}, {"outbox", "stats", "-c", mem.cfg}} {
		code, _, errOut := gobridge(t, args...)
		if code != exitFailure || !strings.Contains(errOut, "memory") || !strings.Contains(errOut, "console") {
			t.Errorf("%v on a memory store: exit %d, %q", args, code, errOut)
		}
	}
}

// TestDLQ_OnDynamoDB runs the dead-letter commands against DynamoDB Local.
func TestDLQ_OnDynamoDB(t *testing.T) {
	fx := newStoreFixture(t, "dynamodb")
	base := time.Now().Add(-time.Minute).Truncate(time.Millisecond)
	ids := fx.dead(t, "alarms", 3, []byte("{\"t\":1}"), "permanent: 400", base)

	code, out, errOut := gobridge(t, "dlq", "list", "-c", fx.cfg, "--limit", "2", "--format", "json")
	var page struct {
		DeadLetters []admin.DeadLetter `json:"dead_letters"`
		Next        string             `json:"next"`
	}
	if code != exitOK || json.Unmarshal([]byte(out), &page) != nil {
		t.Fatalf("list: exit %d\n%s%s", code, out, errOut)
	}
	if len(page.DeadLetters) != 2 || page.DeadLetters[0].ID != ids[0] || page.Next == "" {
		t.Fatalf("page 1 = %+v", page)
	}
	code, out, _ = gobridge(t, "dlq", "show", "-c", fx.cfg, ids[2])
	if code != exitOK || !strings.Contains(out, `{"t":1}`) {
		t.Fatalf("show: exit %d\n%s", code, out)
	}
	code, out, _ = gobridge(t, "dlq", "requeue", "-c", fx.cfg, ids[0])
	if code != exitOK || !strings.Contains(out, "requeued "+ids[0]) {
		t.Fatalf("requeue: exit %d\n%s", code, out)
	}
	code, out, _ = gobridge(t, "dlq", "drop", "-c", fx.cfg, "--all", "--route", "alarms", "--yes")
	if code != exitOK || !strings.Contains(out, "dropped 2 of 2") {
		t.Fatalf("drop --all: exit %d\n%s", code, out)
	}
	if left := fx.listDead(t, ""); len(left) != 0 {
		t.Fatalf("left: %d", len(left))
	}
	if code, _, errOut := gobridge(t, "outbox", "stats", "-c", fx.cfg); code != exitOK {
		t.Errorf("outbox stats on dynamodb: exit %d, %q", code, errOut)
	}
}
