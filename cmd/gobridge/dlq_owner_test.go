package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gobridge/gobridge/bridge"
	"github.com/gobridge/gobridge/internal/testservices"
	"github.com/gobridge/gobridge/message"
	"github.com/gobridge/gobridge/routes"
	"github.com/gobridge/gobridge/stores"
)

// runOwner writes a blueprint with a SQLite outbox and the admin listener
// at adminAddr ("" disables it; token s3cret), runs a bridge on it until the test ends,
// and adds one dead letter of route alarms, and one with each of more as
// its ID; it returns the blueprint's path and the first letter's ID.
func runOwner(t *testing.T, adminAddr string, stdout io.Writer, logs io.Writer, more ...string) (string, string) {
	t.Helper()
	return runBridge(t, adminAddr, "{type: sqlite, options: {path: PATH}}", stdout, logs, more...)
}

// runBridge is runOwner with the outbox store (PATH: a file in a new directory).
func runBridge(t *testing.T, adminAddr, store string, stdout io.Writer, logs io.Writer, more ...string) (string, string) {
	t.Helper()
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "bridge.yaml")
	yaml := fmt.Sprintf(`version: 1
bridge: {id: owned, admin: {listen: %q, token: s3cret}}
stores:
  outbox: %s
receivers:
  - {id: edge, type: mqtt_listener, options: {listen: "127.0.0.1:0"}, topics: [{topic: "a/#", qos: 1}]}
senders:
  - {id: out, type: stdout}
routes:
  - {id: alarms, receiver: edge, topic: "a/#", sender: out, delivery_mode: shared_outbox, session: {id: plant}}
`, adminAddr, strings.ReplaceAll(store, "PATH", strconv.Quote(filepath.Join(dir, "outbox.db"))))
	if err := os.WriteFile(cfgPath, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, probs, err := routes.Load(cfgPath)
	if err != nil || probs.HasErrors() {
		t.Fatalf("load: %v %v", err, probs)
	}
	b, err := bridge.New(cfg, bridge.Options{Stdout: stdout, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	id := message.NewID()
	var dead []stores.Record
	for _, id := range append([]string{id}, more...) {
		dead = append(dead, stores.Record{Session: "plant", Route: "alarms", State: stores.Dead, DeadReason: "http 422",
			Envelope: message.Envelope{ID: id, Topic: "a/1", Payload: []byte("fixed-upstream"), QoS: 1}})
	}
	if err := b.Store().Write(t.Context(), &stores.Batch{Append: dead}); err != nil {
		t.Fatal(err)
	}
	return cfgPath, id
}

// TestDLQ_IDsThatLookLikePathsReachTheOwner: an envelope ID is data (an
// idempotency_key template may make it "." or hold "//"); requeue and drop
// through the owner's admin API act on that one letter. `dlq requeue
// --to-route alarms .` sent POST /api/dead-letters/./requeue?route=alarms,
// which the bridge redirected to the bulk requeue of route alarms (every
// letter of it requeued, "requeued . as  (route )" printed, exit 0); ".."
// and "plant//7" were "not found: no such admin endpoint".
func TestDLQ_IDsThatLookLikePathsReachTheOwner(t *testing.T) {
	cfgPath, other := runOwner(t, testservices.FreeAddr(t), io.Discard, io.Discard, ".", "..", "plant//7")
	for _, args := range [][]string{{"requeue", "--to-route", "alarms", "."}, {"drop", ".."}, {"drop", "plant//7"}} {
		code, out, errOut := gobridge(t, append([]string{"dlq", args[0], "-c", cfgPath}, args[1:]...)...)
		id := args[len(args)-1]
		if want := "dropped " + id + "\n"; code != exitOK || !strings.HasPrefix(out, "requeued "+id+" as ") && out != want ||
			args[0] == "requeue" && !strings.Contains(out, "(route alarms)") {
			t.Errorf("dlq %s: exit %d\n%s%s", strings.Join(args, " "), code, out, errOut)
		}
	}
	// One not found is said once, as without a bridge ("stores: not found:
	// stores: not found" before).
	for _, args := range [][]string{{"requeue", "nope"}, {"drop", "--route", "alarms", "nope"}} {
		code, out, errOut := gobridge(t, append([]string{"dlq", args[0], "-c", cfgPath}, args[1:]...)...)
		if code != exitFailure || strings.Count(errOut, "not found") != 1 {
			t.Errorf("dlq %s: exit %d\n%s%s", strings.Join(args, " "), code, out, errOut)
		}
	}
	code, list, errOut := gobridge(t, "dlq", "list", "-c", cfgPath)
	if code != exitOK || !strings.Contains(list, other) || strings.Count(list, "\n") != 2 {
		t.Errorf("after acting on three letters, the fourth should be the only one left: exit %d\n%s%s", code, list, errOut)
	}
}

// TestDLQ_RequeueGoesThroughTheBridgeThatOwnsTheFile: with a bridge running
// on the SQLite file, the CLI cannot take it; it reads through a read-only
// connection and sends the requeue to the bridge's admin API, whose drainer
// delivers the record at once (DESIGN.md §11.2).
func TestDLQ_RequeueGoesThroughTheBridgeThatOwnsTheFile(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	adminAddr := ln.Addr().String()
	_ = ln.Close()
	var out, logs testservices.Buffer
	cfgPath, id := runOwner(t, adminAddr, &out, &logs)
	code, list, errOut := gobridge(t, "dlq", "list", "-c", cfgPath)
	if code != exitOK || !strings.Contains(list, id) {
		t.Fatalf("list while the bridge owns the file: exit %d\n%s%s", code, list, errOut)
	}
	code, res, errOut := gobridge(t, "dlq", "requeue", "-c", cfgPath, id)
	if code != exitOK || !strings.Contains(res, "requeued "+id) || !strings.Contains(errOut, "the outbox is owned by a running bridge (pid ") || !strings.Contains(errOut, "admin API at http://"+adminAddr) {
		t.Fatalf("requeue while the bridge owns the file: exit %d\n%s%s", code, res, errOut)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(out.String(), "fixed-upstream") {
		if time.Now().After(deadline) {
			t.Fatalf("the requeued record was not delivered; stdout: %q", out.String())
		}
		time.Sleep(10 * time.Millisecond) // polling interval
	}
	// The admin server logs the change (README "Who may see and change
	// what") with one component key, as every logger does.
	for line := range strings.Lines(logs.String()) {
		if strings.Contains(line, "dead letter requeued") && strings.Count(line, "component=") != 1 {
			t.Errorf("the requeue log line has not one component key: %s", line)
		}
	}
	if !strings.Contains(logs.String(), "dead letter requeued") {
		t.Errorf("the requeue was not logged:\n%s", logs.String())
	}
}

// TestDLQ_RequeueRefusedWhenTheOwnerHasNoAdminAPI: with a bridge running on
// the SQLite file and its admin API disabled, or on a port chosen at its
// start (the CLI built http://host:0), a change cannot reach it; the CLI
// says so and how to proceed, rather than failing on the read-only file.
func TestDLQ_RequeueRefusedWhenTheOwnerHasNoAdminAPI(t *testing.T) {
	for listen, why := range map[string]string{"": "admin API is disabled", "127.0.0.1:0": "port chosen at its start (127.0.0.1:0)"} {
		cfgPath, id := runOwner(t, listen, io.Discard, io.Discard)
		for _, verb := range []string{"requeue", "drop"} {
			code, res, errOut := gobridge(t, "dlq", verb, "-c", cfgPath, id)
			if code == exitOK || !strings.Contains(errOut, why) || !strings.Contains(errOut, "bridge.admin.listen") || strings.Contains(errOut, "read-only") {
				t.Errorf("%s while an owner (admin listen %q) runs: exit %d\n%s%s", verb, listen, code, res, errOut)
			}
		}
		if code, list, errOut := gobridge(t, "dlq", "list", "-c", cfgPath); code != exitOK || !strings.Contains(list, id) {
			t.Fatalf("list while the bridge owns the file: exit %d\n%s%s", code, list, errOut)
		}
		// --all without --yes changes nothing: it reads, as list does. It
		// opened the file to write, so it failed here like a change.
		for _, verb := range []string{"requeue", "drop"} {
			code, out, errOut := gobridge(t, "dlq", verb, "-c", cfgPath, "--all")
			if code != exitOK || !strings.Contains(out, id) || !strings.Contains(out, "nothing changed") {
				t.Errorf("%s --all (a dry run) while an owner (admin listen %q) runs: exit %d\n%s%s", verb, listen, code, out, errOut)
			}
		}
	}
}

// TestDLQ_TheOwnersAdminAPIIsReachedWithoutAProxy: the bridge that owns the
// file runs on this host, so the CLI connects to its admin API directly,
// whatever HTTP_PROXY says. It went through the proxy for an admin listen
// that is not loopback (0.0.0.0:PORT, a host name), sending the admin token
// to the proxy, and failed with the proxy's answer (502 here). The command
// runs in a process of its own: net/http reads the proxy variables once per
// process.
func TestDLQ_TheOwnersAdminAPIIsReachedWithoutAProxy(t *testing.T) {
	if cfg := os.Getenv("GOBRIDGE_TEST_OWNER_CFG"); cfg != "" { // the child process
		os.Exit(run(context.Background(), []string{"dlq", "requeue", "-c", cfg, os.Getenv("GOBRIDGE_TEST_OWNER_ID")}, os.Stdout, os.Stderr))
	}
	var proxied atomic.Int32
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		proxied.Add(1)
		http.Error(w, "the proxy cannot reach it", http.StatusBadGateway)
	}))
	defer proxy.Close()
	_, port, _ := net.SplitHostPort(testservices.FreeAddr(t))
	cfgPath, id := runOwner(t, "0.0.0.0:"+port, io.Discard, io.Discard)
	cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestDLQ_TheOwnersAdminAPIIsReachedWithoutAProxy$")
	cmd.Env = append(os.Environ(), "GOBRIDGE_TEST_OWNER_CFG="+cfgPath, "GOBRIDGE_TEST_OWNER_ID="+id,
		"HTTP_PROXY="+proxy.URL, "http_proxy="+proxy.URL, "NO_PROXY=", "no_proxy=")
	out, err := cmd.CombinedOutput()
	if err != nil || proxied.Load() != 0 || !strings.Contains(string(out), "requeued "+id) {
		t.Fatalf("requeue with HTTP_PROXY set: %v, %d requests to the proxy\n%s", err, proxied.Load(), out)
	}
}

// TestDLQ_ChangesGoOnlyToTheBridgeThatOwnsTheFile: the admin address comes
// from FILE, which may not be what the owner runs with (the file edited
// since, a ${VAR} the service's environment sets and the shell does not);
// it may then be another bridge's. The CLI checks that the admin API
// answers for the process holding the file's lock, and refuses otherwise.
// It dropped the other bridge's dead letter with the same ID ("dropped
// shared", exit 0), leaving the owner's.
func TestDLQ_ChangesGoOnlyToTheBridgeThatOwnsTheFile(t *testing.T) {
	addrA, addrB := testservices.FreeAddr(t), testservices.FreeAddr(t)
	cfgA, _ := runOwner(t, addrA, io.Discard, io.Discard, "shared")
	cfgB, _ := runOwner(t, addrB, io.Discard, io.Discard, "shared")
	b, err := os.ReadFile(cfgB)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfgB, []byte(strings.Replace(string(b), addrB, addrA, 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := gobridge(t, "dlq", "drop", "-c", cfgB, "shared")
	if code != exitFailure || !strings.Contains(errOut, "http://"+addrA) || !strings.Contains(errOut, "not the bridge that owns") {
		t.Errorf("drop through another bridge's admin API: exit %d\n%s%s", code, out, errOut)
	}
	// A bridge without a SQLite outbox names no file: it owns none.
	addrM := testservices.FreeAddr(t)
	runBridge(t, addrM, "{type: memory}", io.Discard, io.Discard, "shared")
	if err := os.WriteFile(cfgB, []byte(strings.Replace(string(b), addrB, addrM, 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = gobridge(t, "dlq", "drop", "-c", cfgB, "shared")
	if code != exitFailure || !strings.Contains(errOut, "no SQLite outbox") {
		t.Errorf("drop through the admin API of a bridge without a SQLite outbox: exit %d\n%s%s", code, out, errOut)
	}
	for _, cfg := range []string{cfgA, cfgB} {
		if code, out, errOut := gobridge(t, "dlq", "show", "-c", cfg, "shared"); code != exitOK {
			t.Errorf("the letter of %s is gone: exit %d\n%s%s", cfg, code, out, errOut)
		}
	}
}
