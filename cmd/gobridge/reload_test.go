package main

import (
	"context"
	"os/signal"
	"syscall"
	"testing"
	"time"
)

// TestReloadSignals_ReloadsOnSIGHUP sends this test process a real SIGHUP
// while catchHUP catches it: the process lives on and the reload runs,
// also for a signal that arrived before onHUP started.
func TestReloadSignals_ReloadsOnSIGHUP(t *testing.T) {
	reloaded := make(chan struct{}, 2)
	hup := catchHUP()
	defer signal.Stop(hup)
	if err := syscall.Kill(syscall.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		onHUP(ctx, hup, func(context.Context) { reloaded <- struct{}{} })
	}()
	defer func() {
		cancel()
		<-done
	}()
	wait := func(n int) {
		t.Helper()
		select {
		case <-reloaded:
		case <-time.After(10 * time.Second):
			t.Fatalf("no reload %d after SIGHUP", n)
		}
	}
	wait(1)
	if err := syscall.Kill(syscall.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	wait(2)
}
