package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestRunCommand_RefusesAnInvalidConfig(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(path, []byte("version: 2\nbridge: {id: x}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	if code := run(t.Context(), []string{"run", "-c", path}, &stdout, &stderr); code != exitFailure {
		t.Fatalf("exit %d, want %d; stderr:\n%s", code, exitFailure, stderr.String())
	}
	if !strings.Contains(stderr.String(), path+":1:") || !strings.Contains(stderr.String(), "not starting") {
		t.Errorf("stderr lacks the positioned problems and the refusal:\n%s", stderr.String())
	}
}

func TestRunCommand_UsageErrors(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	if code := run(t.Context(), []string{"run"}, &stdout, &stderr); code != exitUsage {
		t.Fatalf("run without -c: exit %d, want %d", code, exitUsage)
	}
}

func TestRunCommand_RunsUntilCancelledAndExitsZero(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	dir := t.TempDir()
	cfg := fmt.Sprintf(`version: 1
bridge: {id: t, admin: {listen: ""}, log: {format: text}}
stores:
  outbox: {type: sqlite, options: {path: %q}}
receivers:
  - {id: edge, type: mqtt_listener, options: {listen: %q}, topics: [{topic: "#", qos: 1}]}
senders:
  - {id: console, type: stdout}
routes:
  - {id: all, receiver: edge, topic: "#", sender: console, delivery_mode: shared_outbox, session: {id: edge}}
`, filepath.Join(dir, "outbox.db"), addr)
	path := filepath.Join(dir, "bridge.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	var stdout, stderr bytes.Buffer
	code := make(chan int, 1)
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		code <- run(ctx, []string{"run", "-c", path}, &stdout, &stderr)
	}()
	// The test owns the run goroutine: on a failure path it is stopped and
	// waited for too.
	t.Cleanup(func() {
		cancel()
		select {
		case <-exited:
		case <-time.After(15 * time.Second):
			t.Error("run did not return within 15s of cancel")
		}
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			_ = c.Close()
			break
		}
		select {
		case c := <-code: // it gave up (e.g. the probed port was taken): do not wait 10s
			t.Fatalf("run exited with %d before its listener came up; stderr:\n%s", c, stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("listener never came up: %v", err)
		}
		time.Sleep(10 * time.Millisecond) // polling for the port
	}
	cancel()
	select {
	case c := <-code:
		if c != exitOK {
			t.Fatalf("exit %d after cancel, want 0; stderr:\n%s", c, stderr.String())
		}
	case <-time.After(15 * time.Second):
		t.Fatal("run did not return within 15s of cancel")
	}
}
