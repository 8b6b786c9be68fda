package main

import (
	"context"
	"syscall"
	"testing"
	"time"
)

// TestReloadSignals_ReloadsOnSIGHUP sends this test process a real SIGHUP
// while reloadSignals catches it: the process lives on and the reload runs,
// also for a signal that arrived before serve started.
func TestReloadSignals_ReloadsOnSIGHUP(t *testing.T) {
	reloaded := make(chan struct{}, 2)
	r := catchReloads()
	if err := syscall.Kill(syscall.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	r.serve(t.Context(), func(context.Context) { reloaded <- struct{}{} })
	wait := func(n int) {
		t.Helper()
		select {
		case <-reloaded:
		case <-time.After(10 * time.Second):
			r.stop()
			t.Fatalf("no reload %d after SIGHUP", n)
		}
	}
	wait(1)
	if err := syscall.Kill(syscall.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	wait(2)
	r.stop()
}
