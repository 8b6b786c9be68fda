package bridge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/gobridge/gobridge/redact"
	"github.com/gobridge/gobridge/stores"
)

// adminServer serves /healthz, /readyz and /metrics (open, and free of
// secrets), and the admin API and console (package admin, guarded by its
// Host check and token), plus what other parts register with Handle and
// HandleMutating.
type adminServer struct {
	b   *Bridge
	mux *http.ServeMux
	ln  net.Listener // nil when disabled
	srv *http.Server
}

// newAdminServer builds the handler and, unless bridge.admin.listen is "",
// opens its listener (so that AdminAddr is known before Run).
func newAdminServer(b *Bridge) (*adminServer, error) {
	a := &adminServer{b: b, mux: http.NewServeMux()}
	a.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = fmt.Fprintln(w, "ok")
	})
	a.mux.HandleFunc("GET /readyz", a.readyz)
	a.mux.Handle("GET /metrics", promhttp.HandlerFor(b.gather, promhttp.HandlerOpts{DisableCompression: true}))
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

// Handle registers an admin endpoint (pattern as for http.ServeMux) behind
// the admin API's Host check and token (package admin). Call it before Run.
func (b *Bridge) Handle(pattern string, h http.Handler) {
	b.ops.Handle(pattern, h)
	b.admin.mux.Handle(pattern, b.ops)
}

// HandleMutating is Handle for an endpoint that changes state: without
// bridge.admin.token it is allowed only from loopback clients with the
// X-Requested-By header. Call it before Run.
func (b *Bridge) HandleMutating(pattern string, h http.Handler) {
	b.ops.HandleMutating(pattern, h)
	b.admin.mux.Handle(pattern, b.ops)
}

// Store returns the outbox store the bridge opened (nil when the config has
// none), for admin endpoints registered with Handle and HandleMutating. It
// is closed when Run returns.
func (b *Bridge) Store() stores.Store { return b.store }
