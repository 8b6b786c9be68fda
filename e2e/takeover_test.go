package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gobridge/gobridge/internal/testservices"
	"github.com/gobridge/gobridge/stores"
	"github.com/gobridge/gobridge/stores/dynamodb"
)

// TestMultiInstance_PausedOwnerIsFencedOut pauses (SIGSTOP) a gobridge
// process while its sends hang at the target, past its lease TTL and its
// claims' deadline: a second process sharing the DynamoDB outbox and lease
// table takes the partitions over and delivers everything. When the paused
// process resumes, its renewal is refused and its hanging sends are
// cancelled, or, when a send is answered first, its outcome is counted stale
// and not recorded: b1 settles nothing; nothing is lost and the outbox ends
// empty. b1's MQTT session, which b2 may have adopted, is not taken back
// from b2 by b1's reconnection (it waits for its lease).
func TestMultiInstance_PausedOwnerIsFencedOut(t *testing.T) {
	needBinary(t)
	mqttURL := testservices.MQTTURL(t)
	ddb := testservices.DynamoDBEndpoint(t)
	run := runID("e2e-fence")
	s := newSink(t)
	dir := t.TempDir()
	const partitions, n = 2, 20
	testservices.DropTablesAtCleanup(t, ddb, run+"-outbox")

	s.holdFrom.Store("b1") // b1's sends hang until released
	admin1 := freeAddr(t)
	b1 := startBridge(t, dir, "b1", admin1, instanceConfig(run, "b1", admin1, mqttURL, ddb, s.srv.URL, partitions))
	t.Cleanup(func() { b1.cmd.Process.Signal(syscall.SIGCONT) }) // before its SIGTERM cleanup
	b1.waitReady(t, 60*time.Second)

	var msgs [][2]string
	for i := range n {
		body, _ := json.Marshal(map[string]any{"id": fmt.Sprintf("m-%03d", i), "n": i})
		msgs = append(msgs, [2]string{fmt.Sprintf("%s/line-%d/telemetry", run, i%4), string(body)})
	}
	publishAll(t, publisher(t, mqttURL, run+"-pub"), msgs, 20*time.Second)
	waitFor(t, 30*time.Second, "b1 sending (its sends hang at the target)", func() bool { return s.held.Load() > 0 })

	admin2 := freeAddr(t)
	b2 := startBridge(t, dir, "b2", admin2, instanceConfig(run, "b2", admin2, mqttURL, ddb, s.srv.URL, partitions))
	b2.waitReady(t, 60*time.Second)
	if err := b1.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	paused := time.Now()
	heldAtPause := s.held.Load()
	waitFor(t, 60*time.Second, "b2 delivering every message while b1 is paused", func() bool {
		_, distinct := s.counts()
		return distinct == n
	})
	t.Logf("b1 paused with %d sends hanging; b2 delivered all %d messages %s later",
		heldAtPause, n, time.Since(paused).Round(time.Millisecond))
	for _, d := range s.deliveries() {
		if d.headers.Get("X-Instance") != "b2" {
			t.Errorf("%s delivered by %s while b1 was paused", d.key, d.headers.Get("X-Instance"))
		}
	}

	// b1 wakes up; its hanging sends now succeed at the target, but its
	// claims belong to b2's token now.
	if err := b1.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	s.releaseHeld()
	// Whichever b1 sees first: a send answered after the lease was lost is
	// counted stale (its outcome is not recorded); a renewal refused
	// first cancels the sends still hanging. Either way b1 settles nothing.
	waitFor(t, 30*time.Second, "b1 reporting its outcomes as stale, or its lease lost", func() bool {
		log, _ := os.ReadFile(b1.logPath)
		return b1.metric("gobridge_delivery_stale_total", `route="telemetry"`) >= 1 ||
			strings.Contains(string(log), "stopped draining: lease lost")
	})
	st, err := dynamodb.Open(t.Context(), dynamodb.Options{Table: run + "-outbox", Region: "us-east-1", Endpoint: ddb})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	waitFor(t, 30*time.Second, "the outbox empty", func() bool { return live(t, st, "plant") == 0 })
	total, distinct := s.counts()
	t.Logf("b1 stale outcomes: %v; sink: %d deliveries of %d messages (%d duplicates from b1's late sends)",
		b1.metric("gobridge_delivery_stale_total", `route="telemetry"`), total, distinct, total-distinct)
	if distinct != n {
		t.Errorf("sink has %d of %d messages", distinct, n)
	}
	dead, _, err := st.Dead(t.Context(), stores.DeadQuery{})
	if err != nil {
		t.Fatalf("list dead letters: %v", err)
	}
	if len(dead) > 0 {
		t.Errorf("%d dead letters, want none", len(dead))
	}
	// b1's MQTT connection was gone when it woke up. Its reconnection waits
	// for a renewal of its session's lease, which b1 no longer holds if b2
	// adopted the session; reconnecting first would have kicked b2 off.
	if c := logCount(t, b2, `msg="connection lost"`); c > 0 {
		t.Errorf("b2 lost its broker connection %d times: the resumed b1 took its session back before its lease said so", c)
	}
	t.Logf("b2 adopted %v sessions; b1 logged %d lost session leases", b2.metric("gobridge_receiver_adopted_sessions"),
		logCount(t, b1, "session lease lost"))
}
