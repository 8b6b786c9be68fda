// Package admin is gobridge's operator surface over HTTP: a JSON API for
// sessions, routes, the delivery journal and dead letters (list, get,
// requeue, drop, bulk by route), and the console, one embedded HTML page
// (vanilla JS and inline CSS, no CDN, no build step) that uses that API.
//
// Handler is mounted by the bridge on the admin listener under /api/ and
// /console. With a token configured, every /api/ request needs
// "Authorization: Bearer TOKEN" (401 otherwise); the console page loads
// without it and asks for the token. Without a token, reads are open and
// mutations are allowed only from loopback clients and only with the header
// "X-Requested-By" (any value), which a cross-site form cannot send. Either
// way a request whose Host header is not a name of this server is refused
// (421), so that a web page cannot reach the API by DNS rebinding (see
// Options.AllowedHosts).
//
// Journal keeps the last outcomes per route in memory (never payloads); it
// implements drainer.Observer.
package admin

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/gobridge/gobridge/bearer"
	"github.com/gobridge/gobridge/stores"
)

// Outbox is what the API reads and changes: the bridge's outbox (Requeue
// and Drop go through the running bridge, so that its drainers see the
// requeued records at once), or, for the CLI without a running bridge, the
// store itself.
type Outbox interface {
	Dead(ctx context.Context, q stores.DeadQuery) ([]stores.Record, string, error)
	Stats(ctx context.Context) ([]stores.SessionStats, error)
	// Requeue puts the dead letter with envelope ID id of route of (any
	// route when empty: see stores.FindDead) back for delivery, under
	// route to when it is not empty (a route renamed since), and returns
	// the new record.
	Requeue(ctx context.Context, id, of, to string) (stores.Record, error)
	// Drop deletes the dead letter with envelope ID id of route of.
	Drop(ctx context.Context, id, of string) error
}

// Options are what a Handler serves.
type Options struct {
	// Store is the outbox; nil when the bridge has none (the dead letter
	// endpoints then answer 404 with an explanation).
	Store Outbox
	// Journal holds the delivery outcomes; nil serves an empty journal.
	Journal *Journal
	// Token, when not empty, is the bearer token of every /api/ request;
	// see the package doc for what is allowed without one.
	Token string
	// Listen is the admin listener's address as configured; its host is
	// one of the Host header values the handler answers.
	Listen string
	// AllowedHosts are further host names (ports ignored) a client may use
	// to reach the API and console, such as a reverse proxy's name.
	// Loopback names (localhost, 127.0.0.1, [::1]) and IP literals are
	// always allowed.
	AllowedHosts []string
	// Logger defaults to a discarding logger. Mutations are logged at info.
	Logger *slog.Logger
	// OutboxFile is the SQLite outbox the bridge owns (absolute), shown
	// in /api/overview as "outbox_file": the CLI acts through this API
	// only when it is the file it was asked about.
	OutboxFile string
}

// SessionInfo is one outbox session as the console shows it.
type SessionInfo struct {
	ID string `json:"id"`
	// Pending counts records pending or claimed.
	Pending int `json:"pending"`
	// OldestAgeSeconds is the age of the oldest pending record (0: none).
	OldestAgeSeconds float64 `json:"oldest_age_seconds"`
	// LastSentAt is the last successful send (nil: none since start).
	LastSentAt *time.Time `json:"last_sent_at,omitempty"`
	// Routes are the routes persisting into the session.
	Routes []string `json:"routes"`
}

// Handler serves the admin API and the console. Build it with New.
type Handler struct {
	opts    Options
	journal *Journal
	log     *slog.Logger
	mux     *http.ServeMux
	api     http.Handler    // mux behind the token, when there is one
	hosts   map[string]bool // the listen host and AllowedHosts, as hostOnly returns them
}

// New returns a Handler serving opts.
func New(opts Options) *Handler {
	h := &Handler{opts: opts, journal: cmp.Or(opts.Journal, NewJournal(0)), mux: http.NewServeMux(),
		log: cmp.Or(opts.Logger, slog.New(slog.DiscardHandler)).With("component", "admin"), hosts: map[string]bool{}}
	for _, name := range append([]string{opts.Listen}, opts.AllowedHosts...) {
		if name = hostOnly(name); name != "" {
			h.hosts[name] = true
		}
	}
	h.api = h.mux
	if opts.Token != "" {
		h.api = bearer.Require(opts.Token, h.mux)
	}
	m := h.mux
	m.HandleFunc(consolePattern, h.console)
	m.HandleFunc(consolePattern+"/", h.console)
	m.HandleFunc("GET /api/overview", h.overview)
	m.HandleFunc("GET /api/sessions", h.listSessions)
	m.HandleFunc("GET /api/routes", h.listRoutes)
	m.HandleFunc("GET /api/journal", h.listJournal)
	m.HandleFunc("GET /api/stats", h.withStore(h.stats))
	m.HandleFunc("GET /api/dead-letters", h.withStore(h.listDead))
	m.HandleFunc("GET /api/dead-letters/{id}", h.withStore(h.getDead))
	m.Handle("POST /api/dead-letters/{id}/requeue", h.mutating(h.withStore(h.requeue)))
	m.Handle("POST /api/dead-letters/{id}/drop", h.mutating(h.withStore(h.drop)))
	m.Handle("DELETE /api/dead-letters/{id}", h.mutating(h.withStore(h.drop)))
	m.Handle("POST /api/dead-letters/requeue", h.mutating(h.withStore(h.bulk)))
	m.Handle("POST /api/dead-letters/drop", h.mutating(h.withStore(h.bulk)))
	m.HandleFunc("/api/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "no such admin endpoint: "+r.Method+" "+r.URL.Path)
	})
	return h
}

// ServeHTTP implements http.Handler: it refuses a foreign Host (421),
// serves the console page, and serves everything else behind the token.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	if !h.hostAllowed(r.Host) {
		writeError(w, http.StatusMisdirectedRequest, fmt.Sprintf("the Host %q is not a name of this admin server (DNS rebinding protection): "+
			"use its listen address, localhost or an IP address, or add the name to bridge.admin.allowed_hosts", r.Host))
		return
	}
	// A path the router would redirect to its clean form is refused: a
	// client that follows the redirect could land on another action (POST
	// /api/dead-letters//requeue, an empty ID, on the bulk requeue). The
	// router cleans the escaped path: an ID's own slashes are %2F.
	if p := r.URL.EscapedPath(); p != "/" && path.Clean(p) != strings.TrimSuffix(p, "/") {
		writeError(w, http.StatusNotFound, "no such admin endpoint: "+r.Method+" "+r.URL.Path)
		return
	}
	if _, pattern := h.mux.Handler(r); pattern == consolePattern || pattern == consolePattern+"/" {
		h.mux.ServeHTTP(w, r) // the page itself; it asks for the token
		return
	}
	h.api.ServeHTTP(w, r)
}

// HandleMutating registers an extra state-changing API endpoint (pattern as
// for http.ServeMux) under the rules of the package doc. Call it before serving.
func (h *Handler) HandleMutating(pattern string, handler http.Handler) {
	h.mux.Handle(pattern, h.mutating(handler.ServeHTTP))
}

// mutating wraps a state-changing endpoint with the authorization rule of
// the package doc. With a token, ServeHTTP has already checked it.
func (h *Handler) mutating(next http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case h.opts.Token != "":
		case !loopback(r.RemoteAddr):
			writeError(w, http.StatusForbidden, "no admin token is configured (bridge.admin.token): actions are allowed only from loopback")
			return
		case r.Header.Get("X-Requested-By") == "":
			writeError(w, http.StatusForbidden, "actions without a token need the header X-Requested-By (cross-site protection)")
			return
		}
		next(w, r)
	})
}

func (h *Handler) overview(w http.ResponseWriter, r *http.Request) {
	out := map[string]any{
		"now":            time.Now().UTC(),
		"token_required": h.opts.Token != "",
		"has_store":      h.opts.Store != nil,
		"routes":         h.journal.Routes(),
		"senders":        h.journal.Senders(),
		"bucket_seconds": Bucket.Seconds(),
	}
	if h.opts.OutboxFile != "" {
		out["outbox_file"] = h.opts.OutboxFile
	}
	h.addSessions(r.Context(), out)
	writeJSON(w, http.StatusOK, out)
}

func (h *Handler) listSessions(w http.ResponseWriter, r *http.Request) {
	out := map[string]any{}
	h.addSessions(r.Context(), out)
	writeJSON(w, http.StatusOK, out)
}

// addSessions sets out's "sessions" and, when the store could not say
// what is pending (its counts are then 0), "store_error".
func (h *Handler) addSessions(ctx context.Context, out map[string]any) {
	var err error
	out["sessions"], err = h.sessions(ctx)
	if err != nil {
		out["store_error"] = "outbox counts unavailable: " + err.Error()
	}
}

func (h *Handler) listRoutes(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{"routes": h.journal.Routes()})
}

// sessions derives the sessions, sorted by ID, from the journal's routes
// (sorted by session) and the store's Stats.
func (h *Handler) sessions(ctx context.Context) ([]SessionInfo, error) {
	stats := map[string]stores.SessionStats{}
	var err error
	if h.opts.Store != nil {
		var all []stores.SessionStats
		all, err = h.opts.Store.Stats(ctx)
		for _, st := range all {
			stats[st.Session] = st
		}
	}
	lastSent := h.journal.lastSentAt()
	out := []SessionInfo{}
	for _, a := range h.journal.Routes() {
		n := len(out)
		switch {
		case a.Session == "":
		case n > 0 && out[n-1].ID == a.Session:
			out[n-1].Routes = append(out[n-1].Routes, a.Route)
		default:
			st := stats[a.Session]
			si := SessionInfo{ID: a.Session, Pending: st.Live, Routes: []string{a.Route}}
			if t := lastSent[a.Session]; !t.IsZero() {
				si.LastSentAt = &t
			}
			if st.Live > 0 && !st.Oldest.IsZero() {
				si.OldestAgeSeconds = time.Since(st.Oldest).Seconds()
			}
			out = append(out, si)
		}
	}
	return out, err
}

// RouteStats is one route's records in one session, as /api/stats and
// `gobridge outbox stats` show them.
type RouteStats struct {
	Session string `json:"session"`
	Route   string `json:"route"`
	Live    int    `json:"live"`
	Dead    int    `json:"dead"`
	// OldestAgeSeconds is the age of the session's oldest live record.
	OldestAgeSeconds float64 `json:"oldest_age_seconds"`
	// Note flags a route the configuration does not know (orphan).
	Note string `json:"note,omitempty"`
}

// RouteStatsOf flattens a store's Stats at now, sorted by session and route.
func RouteStatsOf(all []stores.SessionStats, now time.Time) []RouteStats {
	var out []RouteStats
	for _, st := range all {
		age := 0.0
		if !st.Oldest.IsZero() {
			age = now.Sub(st.Oldest).Seconds()
		}
		for _, r := range slices.Sorted(maps.Keys(st.Routes)) {
			c := st.Routes[r]
			out = append(out, RouteStats{Session: st.Session, Route: r, Live: c.Live, Dead: c.Dead, OldestAgeSeconds: age})
		}
	}
	return out
}

func (h *Handler) stats(w http.ResponseWriter, r *http.Request) {
	all, err := h.opts.Store.Stats(r.Context())
	if err != nil {
		h.storeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"routes": RouteStatsOf(all, time.Now())})
}

func (h *Handler) listJournal(w http.ResponseWriter, r *http.Request) {
	limit, ok := intParam(w, r, "limit", 100, 1, 10_000)
	if !ok {
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"entries": h.journal.Entries(r.URL.Query().Get("route"), limit)})
}

// ErrReloading is an Outbox's answer to a requeue during a config reload
// (503: try again).
var ErrReloading = errors.New("a configuration reload is in progress: requeue again once it has finished")

func (h *Handler) storeError(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, stores.ErrNotFound):
		writeError(w, http.StatusNotFound, err.Error())
	case errors.Is(err, stores.ErrInvalid):
		writeError(w, http.StatusBadRequest, err.Error())
	case errors.Is(err, ErrReloading):
		writeError(w, http.StatusServiceUnavailable, err.Error())
	default:
		h.log.Error("admin store call failed", "error", err)
		writeError(w, http.StatusInternalServerError, err.Error())
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]string{"error": msg})
}
