package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gobridge/gobridge/internal/testservices"
)

// gobridgeCLI runs a gobridge subcommand to completion and returns its
// stdout, failing the test on a non-zero exit.
func gobridgeCLI(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), binary, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("gobridge %s: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String()
}

// deadLetterList is the part of `gobridge dlq list --format json` the test reads.
type deadLetterList struct {
	DeadLetters []struct {
		ID       string `json:"id"`
		Route    string `json:"route"`
		Topic    string `json:"topic"`
		Reason   string `json:"reason"`
		Attempts int    `json:"attempts"`
	} `json:"dead_letters"`
}

func listDead(t *testing.T, cfgPath string) deadLetterList {
	t.Helper()
	var l deadLetterList
	out := gobridgeCLI(t, "dlq", "list", "-c", cfgPath, "--format", "json")
	if err := json.Unmarshal([]byte(out), &l); err != nil {
		t.Fatalf("dlq list --format json: %v\n%s", err, out)
	}
	return l
}

// TestDeadLetters_RequeueWhileRunning follows an operator through a target
// that rejects messages (HTTP 422, a permanent failure): each message is
// dead-lettered at once with the status in its reason, `gobridge dlq list`
// shows them from the SQLite file the running bridge uses, and after the
// target is fixed `gobridge dlq requeue --all --yes` puts them back: the
// running bridge delivers each once, under a new envelope ID, and the dead
// letters are gone.
func TestDeadLetters_RequeueWhileRunning(t *testing.T) {
	needBinary(t)
	mqttURL := testservices.MQTTURL(t)
	run := runID("e2e-dlq")
	s := newSink(t)
	s.reject.Store(http.StatusUnprocessableEntity)
	admin := freeAddr(t)
	dir := t.TempDir()
	cfg := outboxBridgeConfig(run, admin, sqliteStores(dir+"/outbox.db"), mqttURL, s.srv.URL,
		`[]`, `{}`, `{send_timeout: 2s}`)
	b := startBridge(t, dir, "dlq", admin, cfg)
	b.waitReady(t, 30*time.Second)

	const n = 5
	var msgs [][2]string
	for i := range n {
		msgs = append(msgs, [2]string{fmt.Sprintf("%s/dev-%d/event", run, i), fmt.Sprintf(`{"n":%d}`, i)})
	}
	publishAll(t, publisher(t, mqttURL, run+"-pub"), msgs, 20*time.Second)
	waitFor(t, 20*time.Second, "every message dead-lettered", func() bool {
		return b.metric("gobridge_delivery_dead_lettered_total", `route="r"`) == n
	})
	if got := s.rejected.Load(); got != n {
		t.Errorf("target saw %d requests, want %d: a permanent failure is not retried", got, n)
	}

	// The counter moves when the drainer queues a dead letter, before the
	// group commit that makes it durable (settlements linger 20 ms, and the
	// write takes longer on a loaded machine): dlq list may not show it yet.
	var dead deadLetterList
	waitFor(t, 20*time.Second, "dlq list showing every dead letter", func() bool {
		dead = listDead(t, b.cfgPath)
		return len(dead.DeadLetters) >= n
	})
	if len(dead.DeadLetters) != n {
		t.Fatalf("dlq list shows %d dead letters, want %d", len(dead.DeadLetters), n)
	}
	var deadIDs []string
	for _, d := range dead.DeadLetters {
		deadIDs = append(deadIDs, d.ID)
		if d.Route != "r" || !strings.HasPrefix(d.Topic, run+"/") || d.Attempts != 1 ||
			!strings.Contains(d.Reason, "422") || !strings.Contains(d.Reason, "rejected by the e2e sink") {
			t.Errorf("dead letter %+v: want route r, one attempt, and the status and body in the reason", d)
		}
	}

	s.reject.Store(0)
	gobridgeCLI(t, "dlq", "requeue", "-c", b.cfgPath, "--all", "--yes")
	waitFor(t, 30*time.Second, "the requeued messages delivered by the running bridge", func() bool {
		total, _ := s.counts()
		return total >= n
	})
	var bodies []string
	for _, d := range s.deliveries() {
		bodies = append(bodies, d.body)
		if slices.Contains(deadIDs, d.key) || d.key == "" {
			t.Errorf("requeued message %s delivered with Idempotency-Key %q: want a new envelope ID", d.body, d.key)
		}
	}
	slices.Sort(bodies)
	var want []string
	for _, m := range msgs {
		want = append(want, m[1])
	}
	if !slices.Equal(bodies, want) {
		t.Errorf("delivered %q, want each message once: %q", bodies, want)
	}
	if left := listDead(t, b.cfgPath); len(left.DeadLetters) != 0 {
		t.Errorf("dlq list shows %d dead letters after requeue, want none", len(left.DeadLetters))
	}
	waitFor(t, 10*time.Second, "the outbox empty", func() bool {
		return b.metric("gobridge_outbox_pending", `session="s"`) == 0 &&
			b.metric("gobridge_delivery_sent_total", `route="r"`) == n
	})
}

// TestDeadLetters_IngestDeadLetterReplaysAfterAConfigFix follows an operator
// through a wrong processor: a message the transform cannot handle is
// dead-lettered at ingest as it arrived; the config is fixed and the bridge
// restarted on the same SQLite file; `gobridge dlq requeue` then runs the
// message through the fixed route and it is delivered.
func TestDeadLetters_IngestDeadLetterReplaysAfterAConfigFix(t *testing.T) {
	needBinary(t)
	mqttURL := testservices.MQTTURL(t)
	run := runID("e2e-ingest-dead")
	s := newSink(t)
	admin := freeAddr(t)
	dir := t.TempDir()
	config := func(transform string) string {
		return outboxBridgeConfig(run, admin, sqliteStores(dir+"/outbox.db"), mqttURL, s.srv.URL,
			`[{type: transform, expr: '`+transform+`'}]`, `{}`, `{on_permanent_failure: dlq}`)
	}
	b := startBridge(t, dir, "wrong", admin, config(`payload.n * 10`))
	b.waitReady(t, 30*time.Second)
	publishAll(t, publisher(t, mqttURL, run+"-pub"), [][2]string{
		{run + "/dev-1/event", `{"n":4}`}, {run + "/dev-2/event", `n=5`},
	}, 20*time.Second)
	waitFor(t, 20*time.Second, "the JSON message delivered and the other dead-lettered", func() bool {
		total, _ := s.counts()
		return total == 1 && b.metric("gobridge_delivery_dead_lettered_total", `route="r"`) == 1
	})
	dead := listDead(t, b.cfgPath)
	if len(dead.DeadLetters) != 1 || !strings.Contains(dead.DeadLetters[0].Reason, "processor") {
		t.Fatalf("dead letters %+v, want the non-JSON message with a processor reason", dead.DeadLetters)
	}
	b.cancel()
	<-b.done

	fixed := startBridge(t, dir, "fixed", admin, config(`raw`))
	fixed.waitReady(t, 30*time.Second)
	gobridgeCLI(t, "dlq", "requeue", "-c", fixed.cfgPath, dead.DeadLetters[0].ID)
	waitFor(t, 20*time.Second, "the replayed message at the sink", func() bool {
		total, _ := s.counts()
		return total == 2
	})
	var bodies []string
	for _, d := range s.deliveries() {
		bodies = append(bodies, d.body)
	}
	if !slices.Equal(bodies, []string{"40", "n=5"}) {
		t.Errorf("delivered %q, want [40 n=5]", bodies)
	}
	if left := listDead(t, fixed.cfgPath); len(left.DeadLetters) != 0 {
		t.Errorf("dlq list shows %d dead letters after the replay, want none", len(left.DeadLetters))
	}
}
