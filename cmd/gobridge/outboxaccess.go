package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/gobridge/gobridge/admin"
	"github.com/gobridge/gobridge/bridge"
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

// outbox is how the CLI reaches the configured outbox, and how to let go.
type outbox struct {
	admin.Outbox
	close func() error
	// via says how it is reached, for messages ("" when the CLI owns it).
	via string
}

// openOutbox loads FILE (-c of fs) with the shared loader (refusing a config with
// errors, as run does) and opens its outbox store (DESIGN.md §11.2). A
// SQLite file is read through a read-only connection, which leaves the file
// to a bridge that starts meanwhile; to write, one that no bridge owns is
// taken (its lock), and for one that a running bridge owns requeue and drop
// go to that bridge's admin API (its address and token from FILE). A
// DynamoDB table is shared by design and used directly.
func openOutbox(ctx context.Context, fs *flag.FlagSet, path string, write bool) (*routes.Config, *outbox, error) {
	cfg, err := loadValid(fs, path)
	if err != nil {
		return nil, nil, err
	}
	sc := cfg.Stores.Outbox
	if sc == nil {
		return nil, nil, errNoOutbox
	}
	var st stores.Store
	var locked *sqlite.LockedError
	switch sc.Type {
	case "memory":
		return nil, nil, errMemoryStore
	case "sqlite":
		if _, err := os.Stat(sc.Options.Path); errors.Is(err, os.ErrNotExist) { // never created here
			return nil, nil, fmt.Errorf("the SQLite outbox %s does not exist (stores.outbox.options.path in %s; a relative path is "+
				"relative to the working directory), so there is nothing to read or change", sc.Options.Path, path)
		}
		opts := bridge.SQLiteOptions(*sc)
		opts.ReadOnly = !write
		st, err = sqlite.Open(sc.Options.Path, opts)
		if errors.As(err, &locked) {
			opts.ReadOnly = true
			st, err = sqlite.Open(sc.Options.Path, opts)
		}
	case "dynamodb": // the only other type a valid config has
		st, err = dynamodb.Open(ctx, dynamodb.Options{Table: sc.Options.Table, Region: sc.Options.Region, Endpoint: sc.Options.Endpoint})
	}
	if err != nil {
		return nil, nil, err
	}
	off := offline{st, bridge.Placer(cfg)}
	ob := &outbox{Outbox: off, close: st.Close}
	switch listen := *cfg.Bridge.Admin.Listen; {
	case locked == nil:
	case listen == "", strings.HasSuffix(listen, ":0"): // only a change opens it for writing
		st.Close()
		why := "its admin API is disabled"
		if listen != "" {
			why = "its admin API listens on a port chosen at its start (" + listen + "), which the CLI cannot know"
		}
		return nil, nil, fmt.Errorf("%w; %s, so a change cannot reach it: "+
			"set bridge.admin.listen to a fixed address (and restart it), or stop it and run this again", locked, why)
	default:
		api := owned{off, "http://" + listen, cfg.Bridge.Admin.Token.Reveal()}
		if err := api.owns(ctx, sc.Options.Path); err != nil {
			st.Close()
			return nil, nil, fmt.Errorf("%w; %w (bridge.admin.listen in %s may not be what it runs with): nothing changed", locked, err, path)
		}
		ob.Outbox, ob.via = api, fmt.Sprintf("the outbox is owned by a running bridge (pid %d): acting through its admin API at %s", locked.PID, api.base)
	}
	return cfg, ob, nil
}

// offline is the outbox of a store the CLI uses directly.
type offline struct {
	stores.Store
	place stores.Placer
}

func (o offline) Requeue(ctx context.Context, id, of, to string) (stores.Record, error) {
	return stores.Requeue(ctx, o.Store, id, of, to, o.place, time.Now())
}

func (o offline) Drop(ctx context.Context, id, of string) error {
	return stores.DropDead(ctx, o.Store, id, of)
}

// owned reads a store a running bridge owns, and sends changes to that
// bridge's admin API at base.
type owned struct {
	offline
	base, token string
}

func (o owned) Requeue(ctx context.Context, id, of, to string) (stores.Record, error) {
	var out struct {
		ID      string `json:"id"`
		Route   string `json:"route"`
		Session string `json:"session"`
	}
	err := o.call(ctx, http.MethodPost, "/api/dead-letters/"+idSegment(id)+"/requeue?"+url.Values{"of": {of}, "route": {to}}.Encode(), &out)
	r := stores.Record{Route: out.Route, Session: out.Session}
	r.Envelope.ID = out.ID
	return r, err
}

func (o owned) Drop(ctx context.Context, id, of string) error {
	return o.call(ctx, http.MethodPost, "/api/dead-letters/"+idSegment(id)+"/drop?"+url.Values{"of": {of}}.Encode(), new(any))
}

// owns checks that the bridge answering at base owns file, as its
// /api/overview says (one that names no file has no SQLite outbox).
func (o owned) owns(ctx context.Context, file string) error {
	var ov struct {
		File string `json:"outbox_file"`
	}
	if err := o.call(ctx, http.MethodGet, "/api/overview", &ov); err != nil {
		return err
	}
	a, errA := os.Stat(file)
	b, errB := os.Stat(ov.File)
	if errA != nil || errB != nil || !os.SameFile(a, b) {
		return fmt.Errorf("the admin API at %s is not the bridge that owns it: it owns %s", o.base, cmp.Or(ov.File, "no SQLite outbox"))
	}
	return nil
}

// idSegment is id as one path segment: its slashes and dots escaped, so
// that an ID such as "." or ".." is not a dot segment, which the admin API
// refuses (a router would take it for a step up the path).
func idSegment(id string) string {
	return strings.ReplaceAll(url.PathEscape(id), ".", "%2E")
}

// call sends a request to the admin API and decodes the answer into out.
// Admin API errors come back with their message; a dead letter not found
// is ErrNotFound.
func (o owned) call(ctx context.Context, method, path string, out any) error {
	req, err := http.NewRequestWithContext(ctx, method, o.base+path, http.NoBody)
	if err != nil {
		return err
	}
	req.Header.Set("X-Requested-By", "gobridge-cli")
	if o.token != "" {
		req.Header.Set("Authorization", "Bearer "+o.token)
	}
	// The owner runs on this host (the lock is local): never through a
	// proxy, which would get the token.
	resp, err := (&http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{Proxy: nil}}).Do(req)
	if err != nil {
		return fmt.Errorf("the store is owned by a running bridge, whose admin API did not answer: %w", err)
	}
	defer resp.Body.Close()
	dec := json.NewDecoder(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Error string `json:"error"`
		}
		_ = dec.Decode(&e)
		if msg, ok := strings.CutPrefix(e.Error, stores.ErrNotFound.Error()); ok && resp.StatusCode == http.StatusNotFound {
			return fmt.Errorf("%w%s", stores.ErrNotFound, msg) // as the store says it (no endpoint is another 404)
		}
		return fmt.Errorf("admin API: %s: %s", resp.Status, e.Error)
	}
	return dec.Decode(out)
}
