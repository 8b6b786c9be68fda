package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/gobridge/gobridge/routes"
	"github.com/gobridge/gobridge/stores"
	"github.com/gobridge/gobridge/stores/dynamodb"
	"github.com/gobridge/gobridge/stores/sqlite"
)

// errMemoryStore is returned by the store commands when the configured
// outbox is a memory store: its records live inside the bridge process only.
var errMemoryStore = errors.New("the outbox store is memory: its records live only inside the running bridge process, " +
	"so there is nothing to inspect from here; use the bridge's admin API (/api) or console (/console) instead")

// errNoOutbox is returned when the config has no stores.outbox.
var errNoOutbox = errors.New("the config has no stores.outbox (no route uses shared_outbox): there are no outbox records or dead letters")

// OutboxCommand reports on the outbox: `gobridge outbox stats -c FILE
// [--format table|json]`.
type OutboxCommand struct {
	Stdout, Stderr io.Writer
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

const outboxUsage = `Usage: gobridge outbox stats -c FILE [--format table|json]

Stats opens the outbox store configured in FILE (read-only queries; safe
while a bridge runs on the same SQLite file) and prints, per session and
route: records pending (waiting to be claimed), claimed (held by a drainer:
in flight), due now, the age of the oldest pending or claimed record, dead
letters, and records completed in the last hour (delivered, or dropped by
policy). Routes named in FILE are listed even when they have no records.
It reads every live and dead record, so it takes a moment on a large outbox.
A memory outbox cannot be inspected from another process: use the admin
API or console of the running bridge.
`

// Run parses args and runs the subcommand.
func (c *OutboxCommand) Run(ctx context.Context, args []string) error {
	if len(args) == 0 || args[0] != "stats" {
		if len(args) > 0 && isHelp(args[0]) {
			fmt.Fprint(c.Stdout, outboxUsage)
			return flag.ErrHelp
		}
		fmt.Fprint(c.Stderr, outboxUsage)
		return errUsage
	}
	fs := flag.NewFlagSet("outbox stats", flag.ContinueOnError)
	fs.SetOutput(c.Stderr)
	path := fs.String("c", "", "config `FILE` naming the outbox store (required)")
	format := fs.String("format", "table", "output `format`: table or json")
	fs.Usage = func() { fmt.Fprint(fs.Output(), outboxUsage+"\nFlags:\n"); fs.PrintDefaults() }
	if err := fs.Parse(args[1:]); err != nil {
		return parseErr(err)
	}
	switch {
	case *path == "":
		return usageErr(fs, c.Stderr, "outbox stats: -c FILE is required")
	case fs.NArg() > 0:
		return usageErr(fs, c.Stderr, fmt.Sprintf("outbox stats: unexpected argument %q", fs.Arg(0)))
	case *format != "table" && *format != "json":
		return usageErr(fs, c.Stderr, fmt.Sprintf("outbox stats: --format must be table or json, not %q", *format))
	}
	cfg, st, err := openConfiguredStore(ctx, *path, c.Stderr)
	if err != nil {
		return err
	}
	defer st.Close()
	in, ok := st.(stores.Inspector)
	if !ok {
		return fmt.Errorf("outbox stats: the %s store does not support inspection yet", cfg.Stores.Outbox.Type)
	}
	now := time.Now
	if c.Now != nil {
		now = c.Now
	}
	at := now()
	stats, err := in.Inspect(ctx, at)
	if err != nil {
		return fmt.Errorf("outbox stats: %w", err)
	}
	stats = withConfiguredRoutes(cfg, stats)
	if *format == "json" {
		type row struct {
			stores.RouteStats
			OldestAgeSeconds float64 `json:"oldest_age_seconds"`
		}
		rows := make([]row, len(stats))
		for i, s := range stats {
			rows[i] = row{RouteStats: s}
			if !s.OldestPendingAt.IsZero() {
				rows[i].OldestAgeSeconds = at.Sub(s.OldestPendingAt).Seconds()
			}
		}
		enc := json.NewEncoder(c.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(map[string]any{"at": at.UTC(), "routes": rows})
	}
	tw := tabwriter.NewWriter(c.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SESSION\tROUTE\tPENDING\tCLAIMED\tDUE\tOLDEST\tDEAD\tDONE/1H")
	for _, s := range stats {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%s\t%d\t%d\n", s.Session, s.Route, s.Pending, s.Claimed,
			s.Due, age(at, s.OldestPendingAt), s.Dead, s.DoneLastHour)
	}
	return tw.Flush()
}

// withConfiguredRoutes adds a zero row for every shared_outbox route of cfg
// that the store has no records of, keeping the order by session and route.
func withConfiguredRoutes(cfg *routes.Config, stats []stores.RouteStats) []stores.RouteStats {
	have := map[[2]string]bool{}
	for _, s := range stats {
		have[[2]string{s.Session, s.Route}] = true
	}
	for _, r := range cfg.Routes {
		if r.DeliveryMode != routes.SharedOutbox || r.Session.ID == "" {
			continue
		}
		if !have[[2]string{r.Session.ID, r.ID}] {
			stats = append(stats, stores.RouteStats{Session: r.Session.ID, Route: r.ID})
		}
	}
	slices.SortFunc(stats, func(a, b stores.RouteStats) int {
		if a.Session != b.Session {
			if a.Session < b.Session {
				return -1
			}
			return 1
		}
		if a.Route < b.Route {
			return -1
		}
		if a.Route > b.Route {
			return 1
		}
		return 0
	})
	return stats
}

// openConfiguredStore loads FILE with the shared loader (refusing a config
// with errors, as run does) and opens its outbox store. The caller closes
// the store.
func openConfiguredStore(ctx context.Context, path string, stderr io.Writer) (*routes.Config, stores.Store, error) {
	cfg, probs, err := loadConfig(path)
	if err != nil {
		return nil, nil, err
	}
	if probs.HasErrors() {
		_ = probs.Errors().WriteText(stderr)
		fmt.Fprintf(stderr, "config invalid: %d errors\n", len(probs.Errors()))
		return nil, nil, errInvalid
	}
	sc := cfg.Stores.Outbox
	if sc == nil {
		return nil, nil, errNoOutbox
	}
	switch sc.Type {
	case "memory":
		return nil, nil, errMemoryStore
	case "sqlite":
		p := sc.Options.Path
		if p == "" {
			p = "./data/outbox.db"
		}
		st, err := sqlite.Open(p, sqlite.Options{Sync: sc.Options.Sync, DoneRetention: sc.Options.DoneRetention})
		if err != nil {
			return nil, nil, err
		}
		return cfg, st, nil
	case "dynamodb":
		st, err := dynamodb.Open(ctx, dynamodb.Options{Table: sc.Options.Table, Region: sc.Options.Region, Endpoint: sc.Options.Endpoint})
		if err != nil {
			return nil, nil, err
		}
		return cfg, st, nil
	}
	return nil, nil, fmt.Errorf("outbox store type %q is not supported", sc.Type)
}

// age formats now - t for tables ("-" when t is zero).
func age(now, t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := now.Sub(t)
	switch {
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Hour:
		return d.Round(time.Second).String()
	default:
		return d.Round(time.Minute).String()
	}
}

func isHelp(s string) bool { return s == "-h" || s == "-help" || s == "--help" || s == "help" }

// parseErr maps a flag parse error: -h is not a failure, anything else is a
// usage error (the flag package has printed it).
func parseErr(err error) error {
	if errors.Is(err, flag.ErrHelp) {
		return flag.ErrHelp
	}
	return errUsage
}

// usageErr prints msg and the usage, and returns errUsage.
func usageErr(fs *flag.FlagSet, stderr io.Writer, msg string) error {
	fmt.Fprintln(stderr, msg)
	fs.Usage()
	return errUsage
}
