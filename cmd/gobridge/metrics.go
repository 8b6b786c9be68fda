package main

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/gobridge/gobridge/routes"
)

// Process-level metrics, registered by `gobridge run` on the registry the
// runtime serves on /metrics, beside the runtime's own. The registry is new
// for each run, so a registration can only fail on a programmer error: it
// panics (MustRegister), as for the Go and process collectors.

// registerBuildInfo registers gobridge_build_info{version,commit,date,
// goversion}, a gauge that is always 1. Dashboards show it to say what is
// running.
func registerBuildInfo(reg prometheus.Registerer, b buildInfo) {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "gobridge_build_info",
		Help: "Always 1; the labels say which gobridge build is running.",
		ConstLabels: prometheus.Labels{
			"version": b.Version, "commit": b.Commit, "date": b.Date, "goversion": b.GoVersion,
		},
	})
	g.Set(1)
	reg.MustRegister(g)
}

// registerOutboxLimits registers gobridge_outbox_pending_limit{session}:
// the smallest policy.max_outbox_depth among the routes that write to each
// session (shared_outbox and direct_or_outbox), the pending count at which ingest on that route stops
// acknowledging. Alerts divide gobridge_outbox_pending by it ("outbox near
// full"). The returned func sets it from a config (defaults applied): at
// start and after each reload.
func registerOutboxLimits(reg prometheus.Registerer) func(*routes.Config) {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "gobridge_outbox_pending_limit",
		Help: "Pending records at which ingest into the session pushes back (the smallest max_outbox_depth of its routes).",
	}, []string{"session"})
	reg.MustRegister(g)
	return func(cfg *routes.Config) {
		limits := map[string]int{}
		for _, r := range cfg.Routes {
			if !r.UsesOutbox() || r.Session.ID == "" {
				continue
			}
			if l, ok := limits[r.Session.ID]; !ok || r.Policy.MaxOutboxDepth < l {
				limits[r.Session.ID] = r.Policy.MaxOutboxDepth
			}
		}
		g.Reset()
		for s, l := range limits {
			g.WithLabelValues(s).Set(float64(l))
		}
	}
}
