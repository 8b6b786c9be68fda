package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/gobridge/gobridge/admin"
	"github.com/gobridge/gobridge/routes"
)

// OutboxCommand is `gobridge outbox stats` (outboxUsage says what it does).
type OutboxCommand struct {
	Stdout, Stderr io.Writer
}

const outboxUsage = `Usage: gobridge outbox stats -c FILE [--format table|json] [--sample DURATION]

Stats opens the outbox store configured in FILE (safe while a bridge runs
on it: it only reads) and prints, per session and route: the live records
(waiting for delivery, held by a drainer, or retrying), the age of the
session's oldest live record, and the dead letters. Routes named in FILE
are listed even when they have no records; records of routes FILE does not
name (a route renamed or removed) are listed as orphans. It reads the
counts twice, --sample apart (default 2s; 0 reads once), and shows how fast
each route's backlog shrinks (RATE, records per second; negative while it
grows) and, when it shrinks, when it will be empty at that rate (EMPTY IN).
A memory outbox cannot be inspected from another process: use the admin
API or console of the running bridge.
`

// afterFirstSample runs between the two reads of --sample; a test sets it
// to change the store in between.
var afterFirstSample = func() {}

// Run parses args and runs the subcommand.
func (c *OutboxCommand) Run(ctx context.Context, args []string) error {
	if _, err := subcommand(args, outboxUsage, c.Stdout, c.Stderr, "stats"); err != nil {
		return err
	}
	fs := newFlags("outbox stats", outboxUsage+"\nFlags:\n", c.Stderr)
	path := fs.String("c", "", "config `FILE` naming the outbox store (required)")
	format := formatFlag(fs, "table", "json")
	sample := fs.Duration("sample", 2*time.Second, "read the counts twice, `DURATION` apart, to show the drain rate (0: once)")
	if err := parseFlags(fs, args[1:]); err != nil {
		return err
	}
	if *sample < 0 {
		return usageErr(fs, "outbox stats: --sample must not be negative")
	}
	cfg, st, err := openOutbox(ctx, fs, *path, false)
	if err != nil {
		return err
	}
	defer st.close()
	first := time.Now()
	all, err := st.Stats(ctx)
	if err != nil {
		return fmt.Errorf("outbox stats: %w", err)
	}
	before := map[[2]string]int{}
	for _, s := range admin.RouteStatsOf(all, first) {
		before[[2]string{s.Session, s.Route}] = s.Live
	}
	at := first
	if *sample > 0 {
		afterFirstSample()
		select {
		case <-time.After(*sample):
		case <-ctx.Done():
			return ctx.Err()
		}
		at = time.Now()
		if all, err = st.Stats(ctx); err != nil {
			return fmt.Errorf("outbox stats: %w", err)
		}
	}
	type row struct {
		admin.RouteStats
		// DrainPerSecond is how fast the backlog shrank over the sample
		// (negative: it grew); EmptyInSeconds when it empties at that rate.
		DrainPerSecond float64  `json:"drain_per_second"`
		EmptyInSeconds *float64 `json:"empty_in_seconds,omitempty"`
	}
	var rows []row
	for _, s := range withConfiguredRoutes(cfg, admin.RouteStatsOf(all, at)) {
		r := row{RouteStats: s}
		if dt := at.Sub(first).Seconds(); dt > 0 {
			r.DrainPerSecond = float64(before[[2]string{s.Session, s.Route}]-s.Live) / dt
			if r.DrainPerSecond > 0 && s.Live > 0 {
				eta := float64(s.Live) / r.DrainPerSecond
				r.EmptyInSeconds = &eta
			}
		}
		rows = append(rows, r)
	}
	if *format == "json" {
		return writeJSON(c.Stdout, map[string]any{"at": at.UTC(), "routes": rows})
	}
	tw := tabwriter.NewWriter(c.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SESSION\tROUTE\tLIVE\tOLDEST\tDEAD\tRATE\tEMPTY IN\tNOTE")
	for _, r := range rows {
		oldest, rate, eta := "-", "-", "-"
		if r.Live > 0 {
			oldest = seconds(r.OldestAgeSeconds)
		}
		if *sample > 0 {
			rate = fmt.Sprintf("%.1f/s", r.DrainPerSecond)
		}
		if r.EmptyInSeconds != nil {
			eta = seconds(*r.EmptyInSeconds)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%d\t%s\t%s\t%s\n", r.Session, r.Route, r.Live, oldest, r.Dead, rate, eta, r.Note)
	}
	return tw.Flush()
}

func seconds(s float64) string {
	return time.Duration(s * float64(time.Second)).Round(time.Second).String()
}

// withConfiguredRoutes adds a zero row for every shared_outbox route of cfg
// that the store has no records of, keeping the order by session and route.
func withConfiguredRoutes(cfg *routes.Config, stats []admin.RouteStats) []admin.RouteStats {
	for i, s := range stats {
		if !slices.ContainsFunc(cfg.Routes, func(r routes.RouteConfig) bool { return r.ID == s.Route }) {
			stats[i].Note = "orphan: route not in the config"
		}
	}
	for _, r := range cfg.Routes {
		has := func(s admin.RouteStats) bool { return s.Session == r.Session.ID && s.Route == r.ID }
		if r.UsesOutbox() && r.Session.ID != "" && !slices.ContainsFunc(stats, has) {
			stats = append(stats, admin.RouteStats{Session: r.Session.ID, Route: r.ID})
		}
	}
	slices.SortFunc(stats, func(a, b admin.RouteStats) int {
		return cmp.Or(cmp.Compare(a.Session, b.Session), cmp.Compare(a.Route, b.Route))
	})
	return stats
}
