package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gobridge/gobridge/bridge"
	"github.com/gobridge/gobridge/routes"
)

// reloader reloads the config file `gobridge run` started with, on SIGHUP
// and on POST /api/reload (DESIGN.md §11.5): it loads and checks the file
// exactly as `gobridge check` does, and hands a valid one to
// bridge.Reload. An invalid or refused one changes nothing; it is logged
// with its problems and counted as gobridge_config_reloads_total{result=
// "error"}.
type reloader struct {
	path    string
	b       *bridge.Bridge
	log     *slog.Logger
	level   *slog.LevelVar       // bridge.log.level applies live
	limits  func(*routes.Config) // gobridge_outbox_pending_limit follows the config
	reloads *prometheus.CounterVec

	mu sync.Mutex // one reload at a time, file read included
}

// reloadResult is the answer of POST /api/reload.
type reloadResult struct {
	Result   string          `json:"result"` // ok or error
	Error    string          `json:"error,omitempty"`
	Problems routes.Problems `json:"problems,omitempty"` // check's problems, warnings included
}

func newReloader(path string, log *slog.Logger, level *slog.LevelVar, reg prometheus.Registerer, limits func(*routes.Config)) (*reloader, error) {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gobridge_config_reloads_total",
		Help: "Config reloads (SIGHUP, POST /api/reload) by result: ok (applied) or error (invalid or refused: nothing changed).",
	}, []string{"result"})
	c.WithLabelValues("ok")
	c.WithLabelValues("error")
	return &reloader{path: path, log: log, level: level, limits: limits, reloads: c}, reg.Register(c)
}

// reload loads, checks and applies the file, logs and counts the result,
// and returns it with the error that made it fail.
func (r *reloader) reload(ctx context.Context) (reloadResult, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	cfg, probs, err := loadConfig(r.path)
	if err == nil && probs.HasErrors() {
		err = fmt.Errorf("%w: %d errors", errInvalid, len(probs.Errors()))
	}
	if err == nil {
		err = r.b.Reload(ctx, cfg)
	}
	if err != nil {
		r.reloads.WithLabelValues("error").Inc()
		var problems []string
		for _, p := range probs.Errors() {
			problems = append(problems, p.String())
		}
		r.log.Error("config reload failed; the running config is unchanged", "file", r.path, "error", err, "problems", problems)
		return reloadResult{Result: "error", Error: err.Error(), Problems: probs}, err
	}
	r.reloads.WithLabelValues("ok").Inc()
	r.level.Set(logLevel(cfg.Bridge.Log.Level))
	r.limits(cfg)
	for _, w := range probs {
		r.log.Warn("config warning", "problem", w.String())
	}
	return reloadResult{Result: "ok", Problems: probs}, nil
}

// ServeHTTP answers POST /api/reload: 200 with {"result":"ok"}; 422 with
// the problems of an invalid file; 409 for a change only a restart can
// make; 500 when the file cannot be read or the bridge is stopping.
func (r *reloader) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	res, err := r.reload(req.Context())
	code := http.StatusOK
	switch {
	case err == nil:
	case errors.Is(err, errInvalid):
		code = http.StatusUnprocessableEntity
	case errors.Is(err, bridge.ErrRefused):
		code = http.StatusConflict
	default:
		code = http.StatusInternalServerError
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(res)
}

// reloadSignals catches SIGHUP for `gobridge run`, so that `systemctl
// reload gobridge` (ExecReload sends SIGHUP) reloads the config instead of
// ending the process (by default SIGHUP ends a Go program with status 129
// and no log line).
type reloadSignals struct {
	ch     chan os.Signal
	done   chan struct{} // closed when serve's goroutine returns
	served bool
}

// catchReloads starts catching SIGHUP, before the config is loaded. A
// signal that arrives before serve is kept (one) and handled by serve.
// Call stop when done.
func catchReloads() *reloadSignals {
	r := &reloadSignals{ch: make(chan os.Signal, 1), done: make(chan struct{})}
	signal.Notify(r.ch, syscall.SIGHUP)
	return r
}

// serve calls reload for every SIGHUP, in a goroutine, until ctx is done or
// stop is called; stop waits for it.
func (r *reloadSignals) serve(ctx context.Context, reload func(context.Context)) {
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
				reload(ctx)
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
