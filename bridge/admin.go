package bridge

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/net/netutil"

	"github.com/gobridge/gobridge/admin"
	"github.com/gobridge/gobridge/bearer"
	"github.com/gobridge/gobridge/receivers"
	"github.com/gobridge/gobridge/redact"
	"github.com/gobridge/gobridge/stores"
	"github.com/gobridge/gobridge/stores/sqlite"
)

// openAdmin builds the admin handler: /healthz, /readyz and /metrics (open,
// and free of secrets), and the admin API and console (guarded by package
// admin). Unless bridge.admin.listen is "", it opens the listener, so that
// AdminAddr is known before Run.
func (b *Bridge) openAdmin(gather prometheus.Gatherer) error {
	a := b.cfg.Bridge.Admin
	opts := admin.Options{Journal: b.journal, Token: a.Token.Reveal(), AllowedHosts: a.AllowedHosts, Logger: b.base, Listen: *a.Listen}
	if b.store != nil {
		opts.Store = (*Outbox)(b)
	}
	if s, ok := b.store.(*sqlite.Store); ok {
		opts.OutboxFile, _ = filepath.Abs(s.Path())
	}
	b.ops = admin.New(opts)
	b.mux = http.NewServeMux()
	b.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = fmt.Fprintln(w, "ok")
	})
	b.mux.HandleFunc("GET /readyz", b.readyz)
	b.mux.Handle("GET /metrics", promhttp.HandlerFor(gather, promhttp.HandlerOpts{DisableCompression: true}))
	if opts.Listen == "" {
		return nil
	}
	ln, err := net.Listen("tcp", opts.Listen)
	if err != nil {
		return fmt.Errorf("bridge: admin listener: %w", err)
	}
	b.adminLn = &receivers.PendingListener{Listener: netutil.LimitListener(ln, adminMaxConns),
		Log: b.base.With("component", "admin"), Admitted: "a request with the admin token"}
	return nil
}

// adminMaxConns bounds the admin listener's open connections: clients that
// connect and stall (before any token is checked) hold no more; others
// wait, unaccepted, until one closes. Scrapers and the console need a few.
// One address may hold receivers.PendingPerAddress of them, unless they
// carry the admin token (/metrics and /healthz are open to all).
const adminMaxConns = 64

func (b *Bridge) readyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	res := b.Ready(ctx)
	for i, reason := range res.Reasons {
		res.Reasons[i] = redact.Text(reason) // a broker URL may carry a password
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	if !res.Ready {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	_ = json.NewEncoder(w).Encode(res)
}

// AdminAddr is the address the admin server listens on ("" when disabled).
func (b *Bridge) AdminAddr() string {
	if b.adminLn == nil {
		return ""
	}
	return b.adminLn.Addr().String()
}

// Handler returns the admin HTTP handler (also when the admin listener is
// disabled), for tests and for embedding.
func (b *Bridge) Handler() http.Handler { return http.HandlerFunc(b.serve) }

// serve hands /api/ and /console requests to the admin handler as they
// came: a ServeMux would first redirect a path that is not clean to its
// clean form, which can be another action (POST /api/dead-letters//requeue
// is the bulk requeue once cleaned); the admin handler refuses it.
func (b *Bridge) serve(w http.ResponseWriter, r *http.Request) {
	if p := r.URL.Path; strings.HasPrefix(p, "/api/") || p == "/console" || strings.HasPrefix(p, "/console/") {
		b.ops.ServeHTTP(w, r)
		return
	}
	b.mux.ServeHTTP(w, r)
}

// serveAdmin serves the admin listener until ctx is done, then shuts the
// server down.
func (b *Bridge) serveAdmin(ctx context.Context) error {
	if b.adminLn == nil {
		<-ctx.Done()
		return nil
	}
	token := b.cfg.Bridge.Admin.Token.Reveal()
	srv := admin.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if token != "" && bearer.Match(r, token) {
			receivers.Admit(r)
		}
		b.serve(w, r)
	}), cmp.Or(b.adminTimeouts, admin.DefaultTimeouts))
	srv.ConnContext = receivers.PendingConnContext
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(b.adminLn) }()
	select {
	case err := <-errc:
		if errors.Is(err, http.ErrServerClosed) {
			return nil
		}
		return fmt.Errorf("admin server: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		// Requests still running after 2s (a slow client): close their
		// connections rather than leave handler goroutines behind.
		_ = srv.Close()
	}
	<-errc
	return nil
}

// HandleMutating registers an admin endpoint that changes state (pattern
// as for http.ServeMux, under /api/) behind the admin API's Host check and token
// (package admin); without bridge.admin.token it is allowed only from
// loopback clients with the X-Requested-By header. Call it before Run.
func (b *Bridge) HandleMutating(pattern string, h http.Handler) {
	b.ops.HandleMutating(pattern, h)
}

// Store returns the outbox store (nil when the config has none), for admin
// endpoints registered with HandleMutating. Run closes it.
func (b *Bridge) Store() stores.Store { return b.store }
