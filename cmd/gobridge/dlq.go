package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/gobridge/gobridge/admin"
	"github.com/gobridge/gobridge/stores"
)

// DLQCommand is `gobridge dlq` (dlqUsage says what it does).
type DLQCommand struct {
	Stdout, Stderr io.Writer
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

const dlqUsage = `Usage:
  gobridge dlq list    -c FILE [--route R] [--since DURATION] [--limit N] [--after CURSOR] [--format table|json]
  gobridge dlq show    -c FILE [--format text|json] [--route R] ID
  gobridge dlq requeue -c FILE [--to-route NEW] [--route R] (ID... | --all [--yes])
  gobridge dlq drop    -c FILE [--route R] (ID... | --all [--yes])

list     prints dead letters oldest first (by the time they died), a page of
         --limit at a time; the next page's --after CURSOR goes to stderr
         (tables) or to "next" (JSON). Columns: ATTEMPTS (sends), FIRST
         ATTEMPT, DIED, AGE (since it was persisted).
show     prints one dead letter with everything stored, the payload as text
         when it is UTF-8, else base64.
requeue  puts dead letters back for delivery under a new envelope ID (the
         old one kept as causation_id), with attempts reset; --to-route NEW
         when their route was renamed since. One made at ingest runs through
         its route again, processors included. A truncated dead letter
         (payload_too_large) cannot be requeued: only its first KiB was kept.
drop     deletes dead letters for good.
With IDs, requeue and drop act at once. With --all (every dead letter, or
those of --route R) they print what they would change, and change nothing
unless --yes is given. A dead letter is its ID and its route: one message
that two routes dead-lettered leaves a letter on each, with the same ID;
then an ID alone is refused (the error names the routes) and --route R
names the one meant.

They work whether or not a bridge runs on the store. On a SQLite file, list,
show and --all without --yes read through a read-only connection (a bridge
may start meanwhile); requeue and drop take the file when no bridge owns
it, and otherwise go to the owner's admin API (bridge.admin.listen and
token from FILE), once it says it owns the file.
A memory outbox lives only inside the bridge: use its console or admin API.

Exit status: 0 done, 1 failure (an ID not found, a store error, an invalid
config, a memory store), 2 usage error.
`

// Run dispatches to the dlq subcommands.
func (c *DLQCommand) Run(ctx context.Context, args []string) error {
	if c.Now == nil {
		c.Now = time.Now
	}
	sub, err := subcommand(args, dlqUsage, c.Stdout, c.Stderr, "list", "show", "requeue", "drop")
	switch sub {
	case "list":
		return c.list(ctx, args[1:])
	case "show":
		return c.show(ctx, args[1:])
	case "requeue", "drop":
		return c.act(ctx, sub, args[1:])
	}
	return err
}

func (c *DLQCommand) flags(name string) (*flag.FlagSet, *string) {
	fs := newFlags("dlq "+name, dlqUsage+"\nFlags of dlq "+name+":\n", c.Stderr)
	return fs, fs.String("c", "", "config `FILE` naming the outbox store (required)")
}

func (c *DLQCommand) list(ctx context.Context, args []string) error {
	fs, path := c.flags("list")
	route := fs.String("route", "", "list only dead letters of `ROUTE`")
	since := fs.Duration("since", 0, "list only dead letters that died within `DURATION` (e.g. 1h)")
	limit := fs.Int("limit", 50, "page size (`N`, 1..1000)")
	after := fs.String("after", "", "continue after `CURSOR` (printed by the previous page)")
	format := formatFlag(fs, "table", "json")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	switch {
	case *limit < 1 || *limit > 1000:
		return usageErr(fs, "dlq list: --limit must be 1..1000, not %d", *limit)
	case *since < 0:
		return usageErr(fs, "dlq list: --since must not be negative")
	}
	_, st, err := openOutbox(ctx, fs, *path, false)
	if err != nil {
		return err
	}
	defer st.close()
	now := c.Now()
	var cutoff time.Time
	if *since > 0 {
		cutoff = now.Add(-*since)
	}
	recs, next, err := listSince(ctx, st, stores.DeadQuery{Route: *route, After: *after, Limit: *limit, NoPayload: true}, cutoff)
	if err != nil {
		return fmt.Errorf("dlq list: %w", err)
	}
	page := admin.NewDeadPage(recs, next, now)
	if *format == "json" {
		return writeJSON(c.Stdout, page)
	}
	tw := tabwriter.NewWriter(c.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tROUTE\tATTEMPTS\tFIRST ATTEMPT\tDIED\tAGE\tREASON")
	for _, d := range page.DeadLetters {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\n", safe(d.ID), safe(d.Route), d.Attempts,
			stamp(d.FirstAttemptAt), stamp(d.DeadAt), age(now, d.CreatedAt), oneLine(d.Reason, 80))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if next != "" {
		routeFlag := ""
		if *route != "" {
			routeFlag = " --route " + safe(*route)
		}
		fmt.Fprintf(c.Stderr, "more: gobridge dlq list -c %s%s --limit %d --after %s\n", *path, routeFlag, *limit, safe(next))
	}
	return nil
}

// listSince returns one page of f whose records died at or after cutoff
// (all when zero). Pages wholly older than cutoff are skipped (the list is
// oldest first, so the rest of the page after the first match matches too).
func listSince(ctx context.Context, st admin.Outbox, f stores.DeadQuery, cutoff time.Time) ([]stores.Record, string, error) {
	for {
		recs, next, err := st.Dead(ctx, f)
		if err != nil || cutoff.IsZero() {
			return recs, next, err
		}
		if i := slices.IndexFunc(recs, func(r stores.Record) bool { return !r.DeadAt.Before(cutoff) }); i >= 0 {
			return recs[i:], next, nil
		}
		if next == "" {
			return nil, "", nil
		}
		f.After = next
	}
}

func (c *DLQCommand) show(ctx context.Context, args []string) error {
	fs, path := c.flags("show")
	format := formatFlag(fs, "text", "json")
	route := fs.String("route", "", "the dead letter's `ROUTE` (needed when one message was dead-lettered by several routes)")
	var pos []string
	if err := parseArgs(fs, args, &pos); err != nil {
		return err
	}
	switch {
	case len(pos) != 1:
		return usageErr(fs, "dlq show: exactly one ID is required")
	case pos[0] == "":
		return usageErr(fs, "dlq show: an ID must not be empty")
	}
	_, st, err := openOutbox(ctx, fs, *path, false)
	if err != nil {
		return err
	}
	defer st.close()
	rec, err := stores.FindDead(ctx, st, pos[0], *route)
	if err != nil {
		return fmt.Errorf("dlq show %s: %w", safe(pos[0]), err)
	}
	d := admin.NewDeadLetter(&rec, c.Now(), true)
	if *format == "json" {
		return writeJSON(c.Stdout, d)
	}
	// Everything printed is escaped (safe): topics, headers, reasons and
	// payloads come from publishers and targets, and must not drive the
	// operator's terminal.
	tw := tabwriter.NewWriter(c.Stdout, 0, 4, 2, ' ', 0)
	line := func(k, v string) { fmt.Fprintf(tw, "%s:\t%s\n", safe(k), safe(v)) }
	line("id", d.ID)
	line("session", fmt.Sprintf("%s (partition %d)", d.Session, d.Partition))
	line("route", d.Route)
	line("topic", d.Topic)
	line("qos", fmt.Sprint(d.QoS))
	if d.Key != "" {
		line("ordering key", d.Key)
	}
	if d.CausationID != "" {
		line("causation id", d.CausationID)
	}
	line("received", stamp(d.ReceivedAt))
	line("created", fmt.Sprintf("%s (age %s)", stamp(d.CreatedAt), age(c.Now(), d.CreatedAt)))
	line("attempts", fmt.Sprint(d.Attempts))
	line("first attempt", stamp(d.FirstAttemptAt))
	line("died", stamp(d.DeadAt))
	if !d.ExpiresAt.IsZero() {
		line("expires", stamp(d.ExpiresAt))
	}
	line("reason", d.Reason)
	if d.LastError != "" && d.LastError != d.Reason {
		line("last error", d.LastError)
	}
	for _, k := range slices.Sorted(maps.Keys(d.Headers)) {
		line("header "+k, d.Headers[k])
	}
	line("payload encoding", d.PayloadEncoding)
	line("payload bytes", fmt.Sprint(d.PayloadBytes))
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(c.Stdout, "payload:\n%s\n", safeBlock(d.Payload))
	return nil
}

func (c *DLQCommand) act(ctx context.Context, verb string, args []string) error {
	fs, path := c.flags(verb)
	route := fs.String("route", "", "only dead letters of `ROUTE` (with IDs: needed when one message was dead-lettered by several routes)")
	to := new(string)
	if verb == "requeue" { // only requeue has it: `dlq drop -h` does not list it
		fs.StringVar(to, "to-route", "", "requeue under `ROUTE` (the dead letters' route was renamed)")
	}
	all := fs.Bool("all", false, "act on every dead letter (of --route when given)")
	yes := fs.Bool("yes", false, "with --all: really do it (without it, only print what would be done)")
	var ids []string
	if err := parseArgs(fs, args, &ids); err != nil {
		return err
	}
	switch {
	case *all && len(ids) > 0:
		return usageErr(fs, "dlq %s: give IDs or --all, not both", verb)
	case !*all && len(ids) == 0:
		return usageErr(fs, "dlq %s: give one or more IDs, or --all (with --route R)", verb)
	case slices.Contains(ids, ""): // a store takes an empty ID for no ID at all
		return usageErr(fs, "dlq %s: an ID must not be empty", verb)
	}
	_, st, err := openOutbox(ctx, fs, *path, !*all || *yes) // --all without --yes only reads
	if err != nil {
		return err
	}
	defer st.close()
	if st.via != "" {
		fmt.Fprintln(c.Stderr, st.via)
	}
	letters := make([]stores.Record, len(ids))
	for i, id := range ids {
		letters[i].Envelope.ID, letters[i].Route = id, *route
	}
	if *all {
		if letters, err = allDead(ctx, st, *route); err != nil {
			return fmt.Errorf("dlq %s: %w", verb, err)
		}
		scope := "every route"
		if *route != "" {
			scope = "route " + *route
		}
		if !*yes {
			fmt.Fprintf(c.Stdout, "would %s %d dead letters of %s:\n", verb, len(letters), scope)
			for i, l := range letters {
				if i == 20 {
					fmt.Fprintf(c.Stdout, "  ... and %d more\n", len(letters)-20)
					break
				}
				fmt.Fprintf(c.Stdout, "  %s (route %s)\n", safe(l.Envelope.ID), safe(l.Route))
			}
			fmt.Fprintln(c.Stdout, "nothing changed; add --yes to do it")
			return nil
		}
	}
	var failed []error
	n := 0
	for _, l := range letters {
		id := l.Envelope.ID
		if err := ctx.Err(); err != nil {
			failed = append(failed, err)
			break
		}
		var err error
		done := "dropped " + safe(id)
		if verb == "requeue" {
			var nr stores.Record
			nr, err = st.Requeue(ctx, id, l.Route, *to)
			done = fmt.Sprintf("requeued %s as %s (route %s)", safe(id), safe(nr.Envelope.ID), safe(nr.Route))
		} else {
			err = st.Drop(ctx, id, l.Route)
		}
		if err != nil {
			failed = append(failed, fmt.Errorf("%s %s: %w", verb, safe(id), err))
			continue
		}
		if !*all {
			fmt.Fprintln(c.Stdout, done)
		}
		n++
	}
	past := map[string]string{"requeue": "requeued", "drop": "dropped"}[verb]
	if *all || len(letters) > 1 {
		fmt.Fprintf(c.Stdout, "%s %d of %d dead letters\n", past, n, len(letters))
	}
	if verb == "requeue" && n > 0 {
		fmt.Fprintln(c.Stdout, "a running bridge delivers them (at once when it owns the store, else at its next poll)")
	}
	return errors.Join(failed...)
}

// allDead lists every dead letter (of route when set), without payloads,
// page by page, oldest first.
func allDead(ctx context.Context, st admin.Outbox, route string) ([]stores.Record, error) {
	var out []stores.Record
	f := stores.DeadQuery{Route: route, Limit: admin.MaxBulk, NoPayload: true}
	for {
		recs, next, err := st.Dead(ctx, f)
		if err != nil {
			return nil, err
		}
		out = append(out, recs...)
		if next == "" {
			return out, nil
		}
		f.After = next
	}
}
