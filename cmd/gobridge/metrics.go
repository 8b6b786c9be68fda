package main

import "github.com/prometheus/client_golang/prometheus"

// registerBuildInfo registers gobridge_build_info{version,commit,date,
// goversion}, a gauge that is always 1, on reg: the registry /metrics
// serves. Dashboards join on it to show what is running.
func registerBuildInfo(reg prometheus.Registerer, b buildInfo) error {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "gobridge_build_info",
		Help: "Always 1; the labels say which gobridge build is running.",
		ConstLabels: prometheus.Labels{
			"version": b.Version, "commit": b.Commit, "date": b.Date, "goversion": b.GoVersion,
		},
	})
	g.Set(1)
	return reg.Register(g)
}
