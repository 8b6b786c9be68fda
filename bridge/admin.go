package bridge

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/gobridge/gobridge/stores"
)

// adminServer serves /healthz, /readyz and /metrics, plus what other parts
// register with Handle and HandleMutating.
type adminServer struct {
	b     *Bridge
	mux   *http.ServeMux
	ln    net.Listener // nil when disabled
	srv   *http.Server
	token string
}

// newAdminServer builds the handler and, unless bridge.admin.listen is "",
// opens its listener (so that AdminAddr is known before Run).
func newAdminServer(b *Bridge) (*adminServer, error) {
	a := &adminServer{b: b, mux: http.NewServeMux(), token: b.cfg.Bridge.Admin.Token.Reveal()}
	a.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = fmt.Fprintln(w, "ok")
	})
	a.mux.HandleFunc("GET /readyz", a.readyz)
	a.mux.Handle("GET /metrics", promhttp.HandlerFor(b.gather, promhttp.HandlerOpts{}))
	listen := *b.cfg.Bridge.Admin.Listen
	if listen == "" {
		return a, nil
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, fmt.Errorf("bridge: admin listener: %w", err)
	}
	a.ln = ln
	a.srv = &http.Server{Handler: a.mux, ReadHeaderTimeout: 10 * time.Second}
	return a, nil
}

func (a *adminServer) readyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	res := a.b.Ready(ctx)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	if !res.Ready {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	_ = json.NewEncoder(w).Encode(res)
}

func (a *adminServer) addr() string {
	if a.ln == nil {
		return ""
	}
	return a.ln.Addr().String()
}

func (a *adminServer) handler() http.Handler { return a.mux }

// run serves until ctx is done, then shuts the server down.
func (a *adminServer) run(ctx context.Context) error {
	if a.srv == nil {
		<-ctx.Done()
		return nil
	}
	errc := make(chan error, 1)
	go func() { errc <- a.srv.Serve(a.ln) }()
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
	if err := a.srv.Shutdown(sctx); err != nil {
		// Requests still running after 2s (a slow client): close their
		// connections rather than leave handler goroutines behind.
		_ = a.srv.Close()
	}
	<-errc
	return nil
}

// close releases the listener when Run never served it.
func (a *adminServer) close() {
	if a.ln != nil && a.srv != nil {
		_ = a.srv.Close()
		_ = a.ln.Close()
	}
}

// requireToken wraps h so that, when a token is configured, requests must
// carry "Authorization: Bearer TOKEN" (401 otherwise).
func (a *adminServer) requireToken(h http.Handler) http.Handler {
	if a.token == "" {
		return h
	}
	want := []byte("Bearer " + a.token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got := []byte(strings.TrimSpace(r.Header.Get("Authorization")))
		if subtle.ConstantTimeCompare(got, want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="gobridge"`)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// Handle registers a read-only admin endpoint (pattern as for
// http.ServeMux). Call it before Run.
func (b *Bridge) Handle(pattern string, h http.Handler) { b.admin.mux.Handle(pattern, h) }

// HandleMutating registers an admin endpoint that changes state: when
// bridge.admin.token is set, it requires "Authorization: Bearer TOKEN".
// Call it before Run.
func (b *Bridge) HandleMutating(pattern string, h http.Handler) {
	b.admin.mux.Handle(pattern, b.admin.requireToken(h))
}

// Store returns the outbox store the bridge opened (nil when the config has
// none), for admin endpoints registered with Handle and HandleMutating. It
// is closed when Run returns.
func (b *Bridge) Store() stores.Store { return b.store }
