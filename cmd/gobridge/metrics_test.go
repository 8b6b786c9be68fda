package main

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestRegisterBuildInfo(t *testing.T) {
	reg := prometheus.NewRegistry()
	b := buildInfo{Version: "v1.2.3", Commit: "abc123", Date: "2026-12-01T00:00:00Z", GoVersion: "go1.26.8"}
	if err := registerBuildInfo(reg, b); err != nil {
		t.Fatal(err)
	}
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
