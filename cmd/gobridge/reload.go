package main

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
)

// reloadSignals catches SIGHUP for `gobridge run`, so that `systemctl
// reload gobridge` (ExecReload sends SIGHUP) no longer kills the process
// (by default SIGHUP ends a Go program with status 129 and no log line).
//
// Hot reload (DESIGN.md §11.5: check the new file, apply it by difference)
// is not built yet: until it is, serve logs a warning and keeps the running
// config. The reload work replaces serve's body with the reload; catching
// the signal early, before the config is loaded, stays.
type reloadSignals struct {
	ch     chan os.Signal
	done   chan struct{} // closed when serve's goroutine returns
	served bool
}

// catchReloads starts catching SIGHUP. A signal that arrives before serve
// is kept (one) and handled by serve. Call stop when done.
func catchReloads() *reloadSignals {
	r := &reloadSignals{ch: make(chan os.Signal, 1), done: make(chan struct{})}
	signal.Notify(r.ch, syscall.SIGHUP)
	return r
}

// serve handles reload signals in a goroutine until ctx is done or stop is
// called; stop waits for it.
func (r *reloadSignals) serve(ctx context.Context, log *slog.Logger) {
	r.served = true
	go func() {
		defer close(r.done)
		for {
			select {
			case <-ctx.Done():
				return
			case _, ok := <-r.ch:
				if !ok {
					return
				}
				// Hook for hot reload: load, check and apply the new config here.
				log.Warn("reload is not supported yet; restart to apply a new config", "signal", "SIGHUP")
			}
		}
	}()
}

// stop stops catching SIGHUP and waits for serve's goroutine, if serve was
// called. After stop, SIGHUP has its default effect again. serve and stop
// are called from one goroutine.
func (r *reloadSignals) stop() {
	signal.Stop(r.ch)
	close(r.ch) // no signal is sent on it after signal.Stop returns
	if r.served {
		<-r.done
	}
}
