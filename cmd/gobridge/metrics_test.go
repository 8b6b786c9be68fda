package main

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestRegisterBuildInfo(t *testing.T) {
	reg := prometheus.NewRegistry()
	b := buildInfo{Version: "v1.2.3", Commit: "abc123", Date: "2026-12-01T00:00:00Z", GoVersion: "go1.26.8"}
	registerBuildInfo(reg, b)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	if len(mfs) != 1 || mfs[0].GetName() != "gobridge_build_info" || len(mfs[0].GetMetric()) != 1 {
		t.Fatalf("gathered %v", mfs)
	}
	m := mfs[0].GetMetric()[0]
	got := map[string]string{}
	for _, l := range m.GetLabel() {
		got[l.GetName()] = l.GetValue()
	}
	want := map[string]string{"version": "v1.2.3", "commit": "abc123", "date": "2026-12-01T00:00:00Z", "goversion": "go1.26.8"}
	if len(got) != len(want) || m.GetGauge().GetValue() != 1 {
		t.Fatalf("labels %v value %v; want %v and 1", got, m.GetGauge().GetValue(), want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("label %s = %q, want %q", k, got[k], v)
		}
	}
}

func TestRegisterOutboxLimits(t *testing.T) {
	inRoot(t)
	cfg, probs, err := loadConfig("testdata/config/memory-outbox-and-other-warnings.yaml")
	if err != nil || probs.HasErrors() {
		t.Fatalf("load: %v %v", err, probs)
	}
	want := map[string]float64{}
	for i := range cfg.Routes {
		r := &cfg.Routes[i]
		if r.DeliveryMode == "shared_outbox" {
			r.Policy.MaxOutboxDepth = 500 + i // each route its own limit: the session reports the smallest
			if _, ok := want[r.Session.ID]; !ok {
				want[r.Session.ID] = float64(500 + i)
				r.DeliveryMode = "direct_or_outbox" // it writes to the outbox too when its target is down
			}
		}
	}
	if len(want) == 0 {
		t.Fatal("the fixture has no shared_outbox route")
	}
	reg := prometheus.NewRegistry()
	set := registerOutboxLimits(reg)
	set(cfg)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			got[m.GetLabel()[0].GetValue()] = m.GetGauge().GetValue()
		}
	}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for s, v := range want {
		if got[s] != v {
			t.Errorf("session %s: limit %v, want %v", s, got[s], v)
		}
	}
}
