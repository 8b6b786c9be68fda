package main

import (
	"log/slog"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestReloadSignals_LogsSIGHUP sends this test process a real SIGHUP while
// reloadSignals catches it: the process lives on and a warning is logged,
// also for a signal that arrived before serve started.
func TestReloadSignals_LogsSIGHUP(t *testing.T) {
	var logs syncBuffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	r := catchReloads()
	if err := syscall.Kill(syscall.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	r.serve(t.Context(), log)
	waitLog := func(n int) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for strings.Count(logs.String(), "reload is not supported yet") < n {
			if time.Now().After(deadline) {
				r.stop()
				t.Fatalf("no warning %d after SIGHUP; logs:\n%s", n, logs.String())
			}
			time.Sleep(5 * time.Millisecond) // polling the log
		}
	}
	waitLog(1)
	if err := syscall.Kill(syscall.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitLog(2)
	r.stop()
	if !strings.Contains(logs.String(), "level=WARN") {
		t.Errorf("the warning is not at WARN:\n%s", logs.String())
	}
}
