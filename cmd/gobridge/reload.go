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
	follow  func(*routes.Config, routes.Problems) // the log level and gauges follow the config
	reloads *prometheus.CounterVec

	mu sync.Mutex // one reload at a time, file read included
}

// reloadResult is the answer of POST /api/reload.
type reloadResult struct {
	Result   string          `json:"result"` // ok or error
	Error    string          `json:"error,omitempty"`
	Problems routes.Problems `json:"problems,omitempty"` // check's problems, warnings included
}

func newReloader(path string, b *bridge.Bridge, log *slog.Logger, reg prometheus.Registerer, follow func(*routes.Config, routes.Problems)) *reloader {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gobridge_config_reloads_total",
		Help: "Config reloads (SIGHUP, POST /api/reload) by result: ok (applied) or error (invalid or refused: nothing changed).",
	}, []string{"result"})
	c.WithLabelValues("ok")
	c.WithLabelValues("error")
	reg.MustRegister(c)
	return &reloader{path: path, b: b, log: log, follow: follow, reloads: c}
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
	r.follow(cfg, probs)
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

// catchHUP starts catching SIGHUP for `gobridge run`, before the config is
// loaded, so that `systemctl reload gobridge` (ExecReload sends SIGHUP)
// reloads the config instead of ending the process (by default SIGHUP ends
// a Go program with status 129 and no log line). A signal that arrives
// before onHUP runs is kept (one). The caller calls signal.Stop on the
// channel when done; SIGHUP then has its default effect again.
func catchHUP() chan os.Signal {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	return hup
}

// onHUP calls reload for every signal on hup until ctx is done; it blocks.
func onHUP(ctx context.Context, hup <-chan os.Signal, reload func(context.Context)) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			reload(ctx)
		}
	}
}
