package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gobridge/gobridge/admin"
	"github.com/gobridge/gobridge/message"
	"github.com/gobridge/gobridge/stores"
)

// hostile is what a publisher (or a target's answer) can put into a dead
// letter: terminal escape sequences (clear screen, set the window title,
// move the cursor), a C1 CSI, a right-to-left override, a carriage return
// that hides what came before, and invalid UTF-8.
const hostile = "ok\x1b[2J\x1b]0;pwned\x07\u009b31m\u202etxt.exe\rhidden\xff"

func TestDLQ_EscapesWhatPublishersWrote(t *testing.T) {
	fx := newStoreFixture(t, "sqlite")
	base := time.Now().Add(-time.Minute)
	id := "id-" + hostile // an idempotency_key processor takes IDs from payloads
	rec := stores.Record{Session: "plant", Route: "alarms", CreatedAt: base, Attempts: 1,
		State: stores.Dead, DeadReason: "permanent: status 400: " + hostile, DeadAt: base,
		Envelope: message.Envelope{ID: id, Topic: "a/" + hostile, QoS: 1, ReceivedAt: base, Key: hostile,
			Payload: []byte("{\"line\": 7,\n\t\"note\": \"\x1b[1A\x1b[2K\u202e\"}"),
			Headers: map[string]string{"x\x1b[8m": "v\r" + hostile}}}
	fx.with(t, func(st stores.Store) {
		if err := st.Write(t.Context(), &stores.Batch{Append: []stores.Record{rec}}); err != nil {
			t.Fatal(err)
		}
	})
	for _, args := range [][]string{
		{"dlq", "list", "-c", fx.cfg},
		{"dlq", "show", "-c", fx.cfg, id},
		{"dlq", "requeue", "-c", fx.cfg, "--all"},
	} {
		code, out, errOut := gobridge(t, args...)
		if code != exitOK {
			t.Fatalf("%v: exit %d: %s", args, code, errOut)
		}
		out += errOut
		for _, bad := range []string{"\x1b", "\x07", "\r", "\u009b", "\u202e", "\xff"} {
			if strings.Contains(out, bad) {
				t.Errorf("%v printed %q raw:\n%q", args[:2], bad, out)
			}
		}
		if !strings.Contains(out, `ok\x1b[2J\x1b]0;pwned\x07\u009b31m\u202etxt.exe\rhidden\xff`) {
			t.Errorf("%v does not show the escaped text:\n%s", args[:2], out)
		}
		if args[1] == "show" && !strings.Contains(out, "{\"line\": 7,\n\t\"note\": \"\\x1b[1A\\x1b[2K\\u202e\"}") {
			t.Errorf("show does not keep the payload's lines and tabs:\n%s", out)
		}
	}
	// JSON stays exact: a program reading it gets what was stored.
	code, out, _ := gobridge(t, "dlq", "show", "-c", fx.cfg, "--format", "json", id)
	var d admin.DeadLetter
	if err := json.Unmarshal([]byte(out), &d); code != exitOK || err != nil {
		t.Fatalf("exit %d: %v", code, err)
	}
	valid := func(s string) string { return strings.ToValidUTF8(s, "\uFFFD") } // JSON's own rule
	for _, c := range [][2]string{{d.ID, id}, {d.Topic, rec.Envelope.Topic}, {d.Key, hostile},
		{d.Headers["x\x1b[8m"], rec.Envelope.Headers["x\x1b[8m"]}, {d.Payload, string(rec.Envelope.Payload)},
		{d.Reason, "permanent: status 400: " + hostile}} {
		if c[0] != valid(c[1]) {
			t.Errorf("json is not exact: %q, want %q", c[0], valid(c[1]))
		}
	}
}

// TestDLQ_ErrorsEscapeWhatPublishersWrote: an error names the dead letter
// (a requeue refused because its route is no longer in the config, a
// letter gone meanwhile), and its ID may come from a payload: the error
// line is escaped too. It was printed raw.
func TestDLQ_ErrorsEscapeWhatPublishersWrote(t *testing.T) {
	fx := newStoreFixture(t, "sqlite")
	rec := stores.Record{Session: "plant", Route: "gone", State: stores.Dead, DeadReason: "400",
		Envelope: message.Envelope{ID: "id-" + hostile, Topic: "a/1", QoS: 1}}
	fx.with(t, func(st stores.Store) {
		if err := st.Write(t.Context(), &stores.Batch{Append: []stores.Record{rec}}); err != nil {
			t.Fatal(err)
		}
	})
	code, out, errOut := gobridge(t, "dlq", "requeue", "-c", fx.cfg, "--all", "--yes")
	for _, bad := range []string{"\x1b", "\x07", "\r", "\u009b", "\u202e", "\xff"} {
		if strings.Contains(out+errOut, bad) {
			t.Errorf("printed %q raw:\n%q", bad, out+errOut)
		}
	}
	if code != exitFailure || !strings.Contains(errOut, `id-ok\x1b[2J\x1b]0;pwned\x07\u009b31m\u202etxt.exe\rhidden\xff`) {
		t.Errorf("exit %d, want %d and the ID escaped in the error:\n%s%s", code, exitFailure, out, errOut)
	}
}

func TestSafe(t *testing.T) {
	for in, want := range map[string]string{
		"plain text, ünïcødé ✓": "plain text, ünïcødé ✓",
		"a\tb\nc":               `a\tb\nc`,
		"\x00\x7f\u0085\u2028":  `\x00\x7f\u0085\u2028`,
		"\xe2\x28\xa1":          `\xe2(\xa1`,
		"\u200f\u2066":          `\u200f\u2066`,
	} {
		if got := safe(in); got != want {
			t.Errorf("safe(%q) = %q, want %q", in, got, want)
		}
	}
	if got := safeBlock("a\tb\nc\r"); got != "a\tb\nc\\r" {
		t.Errorf("safeBlock = %q", got)
	}
}

// TestCheck_NeverPrintsSecrets runs check on a config full of mistakes
// around its secrets: no output format may show one.
func TestCheck_NeverPrintsSecrets(t *testing.T) {
	dir := t.TempDir()
	pwFile := filepath.Join(dir, "pw")
	if err := os.WriteFile(pwFile, []byte("SECRET-FILE-PW\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("GOBRIDGE_TEST_TOK", "{SECRET-ENV-TOKEN}")
	cfg := filepath.Join(dir, "bridge.yaml")
	doc := fmt.Sprintf(`version: 1
bridge:
  id: t
  admin: {listen: "0.0.0.0:9090", token: "SECRET-ADMIN${x", allowed_hosts: ["http://SECRET-HOST@x/"]}
receivers:
  - id: plant
    type: mqtt
    options:
      broker_urls: ["ftp://bridge:SECRET-BROKER-PW@broker:1883", "tcp://bridge:SECRET-SLASH/PW@broker:x"]
      password: SECRET-PW
      password_file: %q
    topics: [{topic: "#"}]
  - id: edge
    type: mqtt_listener
    options: {users: [{username: a, password: "${SECRET-USER-PW}"}]}
    topics: [{topic: "#"}]
senders:
  - id: erp
    type: http
    options:
      url: "ftp://erp/in?api_key=SECRET-API-KEY"
      headers: {Authorization: "Bearer ${GOBRIDGE_TEST_TOK}", Host: "{topic.0}"}
routes:
  - {id: r, receiver: plant, topic: "#", sender: erp, ordering_key: "${GOBRIDGE_TEST_TOK}"}
`, pwFile)
	if err := os.WriteFile(cfg, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	var all bytes.Buffer
	for _, format := range []string{"text", "json"} {
		code, out, errOut := gobridge(t, "check", "-c", cfg, "--format", format)
		if code != exitFailure {
			t.Fatalf("check --format %s: exit %d", format, code)
		}
		all.WriteString(out + errOut)
	}
	for _, p := range []string{"SECRET-ADMIN", "SECRET-BROKER-PW", "SECRET-SLASH", "SECRET-PW", "SECRET-FILE-PW",
		"SECRET-USER-PW", "SECRET-API-KEY", "SECRET-ENV-TOKEN"} {
		if strings.Contains(all.String(), p) {
			t.Errorf("check printed %s", p)
		}
	}
	if n := strings.Count(all.String(), "\n"); n < 10 {
		t.Errorf("expected a dozen problems, got:\n%s", all.String())
	}
	t.Logf("check output:\n%s", all.String())
}
