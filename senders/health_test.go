package senders_test

import (
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gobridge/gobridge/senders"
)

func TestHealth_DownAfterDistinctFailuresUpAfterOneSuccess(t *testing.T) {
	t.Parallel()
	h := senders.NewHealth()
	var changes []bool
	h.OnChange = func(up bool, _ string) { changes = append(changes, up) }
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	step := func(n int) time.Duration { return time.Duration(n) * time.Second }
	fail := errors.New("http 401")
	for range 5 { // one poison message failing again and again is not a down target
		h.Record("same", fail, now, step)
	}
	h.Record("other", fail, now, step)
	if !h.Up() {
		t.Fatal("down after failures on two distinct messages")
	}
	h.Record("third", senders.Capacity(fail, 0), now, step)
	if h.Up() {
		t.Fatal("up after three distinct non-permanent failures")
	}
	if ok, wait := h.Probe(now); ok || wait != time.Second {
		t.Fatalf("Probe at once = %v, %v; want a wait of the first step", ok, wait)
	}
	now = now.Add(time.Second)
	if ok, _ := h.Probe(now); !ok {
		t.Fatal("no probe after the first step")
	}
	if ok, wait := h.Probe(now); ok || wait != 0 {
		t.Fatal("a second probe while one is in flight")
	}
	h.Record("p1", fail, now, step) // the probe failed: next step is 2s
	if ok, wait := h.Probe(now); ok || wait != 2*time.Second {
		t.Fatalf("after a failed probe: %v, %v; want a 2s wait", ok, wait)
	}
	now = now.Add(2 * time.Second)
	h.Probe(now)
	h.Record("p2", senders.Permanent(fail), now, step) // says nothing about the target: probe again at once
	if ok, _ := h.Probe(now); !ok {
		t.Fatal("no probe right after a probe that failed permanently")
	}
	h.Record("p3", nil, now, step)
	if !h.Up() || !h.DeliveredSince(now.Add(-time.Nanosecond)) {
		t.Fatal("not up after a successful probe")
	}
	if len(changes) != 2 || changes[0] || !changes[1] {
		t.Errorf("transitions %v, want down then up", changes)
	}
}

// TestHealth_RacingTransitionsReportTheFinalState: a send that was in
// flight when the sender went down may succeed while the down transition is
// still being reported. The reports must not cross: the last one
// (gobridge_sender_up, the journal) must say what the sender is.
func TestHealth_RacingTransitionsReportTheFinalState(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := senders.NewHealth()
		release := make(chan struct{})
		var mu sync.Mutex
		var reported []bool
		h.OnChange = func(up bool, _ string) {
			if !up {
				<-release // the down report is slow
			}
			mu.Lock()
			reported = append(reported, up)
			mu.Unlock()
		}
		now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		step := func(n int) time.Duration { return time.Duration(n) * time.Second }
		fail := errors.New("http 503")
		h.Record("a", fail, now, step)
		h.Record("b", fail, now, step)
		go h.Record("c", fail, now, step) // the third distinct failure: down
		synctest.Wait()
		go h.Record("d", nil, now, step) // a send in flight before that succeeds: up
		synctest.Wait()
		close(release)
		synctest.Wait()
		if !h.Up() {
			t.Fatal("down after a success")
		}
		if len(reported) == 0 || !reported[len(reported)-1] {
			t.Fatalf("transitions reported %v: the last says down, the sender is up", reported)
		}
	})
}

// A wall clock stepped back while the sender is down (wall-clock readings
// without a monotonic one, as stored ones are) does not hold the next probe
// for the length of the step: it waits at most its backoff step.
func TestHealth_ProbeWaitsAtMostOneStepAfterTheClockWentBack(t *testing.T) {
	t.Parallel()
	h := senders.NewHealth()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	step := func(n int) time.Duration { return time.Duration(n) * time.Second }
	for _, id := range []string{"a", "b", "c"} {
		h.Record(id, errors.New("connection refused"), now, step)
	}
	back := now.Add(-50 * 365 * 24 * time.Hour)
	if ok, wait := h.Probe(back); ok || wait != time.Second {
		t.Fatalf("Probe after the step back = %v, %v; want a wait of the first step", ok, wait)
	}
	if ok, _ := h.Probe(back.Add(time.Second)); !ok {
		t.Fatal("no probe one step after the step back")
	}
}
