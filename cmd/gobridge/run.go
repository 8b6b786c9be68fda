package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os/signal"
	"runtime/debug"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/gobridge/gobridge/bridge"
	"github.com/gobridge/gobridge/routes"
)

// RunCommand is `gobridge run` (runUsage says what it does). It fails with
// errInvalid on a config with errors, runs until ctx is done (SIGINT or
// SIGTERM, from main), and returns nil after a clean shutdown.
type RunCommand struct {
	Stdout, Stderr io.Writer
}

const runUsage = `Usage: gobridge run -c FILE

Run loads FILE (as "gobridge check" does; any error stops it before it
starts anything), then runs the bridge until SIGINT or SIGTERM, and shuts
down gracefully within bridge.shutdown_timeout. SIGHUP (or POST
/api/reload on the admin server) reloads FILE: checked first (an invalid
file changes nothing), then applied by difference; what only a restart can
change is refused and logged. Logs go to stderr; stdout senders write to
stdout.

Flags:
`

// Run parses args, loads the config and runs the bridge.
func (c *RunCommand) Run(ctx context.Context, args []string) error {
	fs := newFlags("run", runUsage, c.Stderr)
	path := fs.String("c", "", "config `FILE` to run (required)")
	var pos []string
	if err := parseArgs(fs, args, &pos); err != nil {
		return err
	}
	if err := needConfig(fs, *path); err != nil {
		return err // reported before a stray argument, as run always did
	}
	if len(pos) > 0 {
		return usageErr(fs, "run: unexpected argument %q", pos[0])
	}
	hup := catchHUP() // SIGHUP from now on reloads, never kills
	defer signal.Stop(hup)
	cfg, probs, err := loadConfig(*path)
	if err != nil {
		return err
	}
	if probs.HasErrors() {
		_ = probs.WriteText(c.Stderr)
		fmt.Fprintf(c.Stderr, "run: config invalid: %s; not starting\n", count(len(probs.Errors()), "error"))
		return errInvalid
	}
	level := new(slog.LevelVar)
	log := newLogger(c.Stderr, cfg.Bridge.Log.Format, level)
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	registerBuildInfo(reg, readBuild(debug.ReadBuildInfo()))
	limits := registerOutboxLimits(reg)
	// follow applies what of a valid config lives outside the bridge, and
	// logs its warnings: at start and after each reload.
	follow := func(cfg *routes.Config, probs routes.Problems) {
		_ = level.UnmarshalText([]byte(cfg.Bridge.Log.Level)) // routes validated it: debug, info, warn or error
		limits(cfg)
		for _, w := range probs.Warnings() {
			log.Warn("config warning", "problem", w.String())
		}
	}
	follow(cfg, probs)
	rt, err := bridge.New(cfg, bridge.Options{Logger: log, Registerer: reg, Stdout: c.Stdout})
	if err != nil {
		log.Error("bridge failed to start", "error", err)
		return err
	}
	rl := newReloader(*path, rt, log, reg, follow)
	rt.HandleMutating("POST /api/reload", rl)
	// The SIGHUP goroutine ends with Run: cancel, then wait for it.
	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wg.Go(func() { onHUP(ctx, hup, func(ctx context.Context) { _, _ = rl.reload(ctx) }) })
	if err := rt.Run(ctx); err != nil {
		log.Error("bridge failed", "error", err)
		return err
	}
	return nil
}

// newLogger builds the process logger from bridge.log: format json or
// text, at level (which a reload may change).
func newLogger(w io.Writer, format string, level slog.Leveler) *slog.Logger {
	opts := &slog.HandlerOptions{Level: level}
	if format == "text" {
		return slog.New(slog.NewTextHandler(w, opts))
	}
	return slog.New(slog.NewJSONHandler(w, opts))
}
