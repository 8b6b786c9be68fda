package bridge

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/gobridge/gobridge/admin"
)

// acctSeed seeds the mix of TestRun_AccountingOfAHostileMixAcrossAKill.
const acctSeed = 20261202

// acctConfig is the config of the accounting test's process run (1 or 2):
// the embedded listener, the outbox store (YAML), a shared_outbox route
// whose idempotency_key, filter and ordering_key read the payload, and an
// HTTP sender that tells the sink which process sent (X-Run). The leases
// last 6s: a killed process's lapse that soon on DynamoDB.
func acctConfig(adminAddr, store, listen, sinkURL string, maxPayload, run int) string {
	return fmt.Sprintf(`version: 1
bridge: {id: acct, admin: {listen: %q}, lease_ttl: 6s, shutdown_timeout: 5s, log: {level: info, format: text}}
stores:
  outbox: %s
receivers:
  - id: edge
    type: mqtt_listener
    options: {listen: %q, allow_anonymous: true, max_payload_bytes: %d}
    topics: [{topic: "acct/#", qos: 1}]
senders:
  - {id: sink, type: http, options: {url: %q, timeout: 10s, headers: {X-Run: "%d"}}}
routes:
  - id: r
    receiver: edge
    topic: "acct/#"
    sender: sink
    delivery_mode: shared_outbox
    ordering_key: "{payload.k}"
    processors:
      - {type: idempotency_key, from: "{payload.id}"}
      - {type: filter, expr: "payload.keep ?? true"}
    session: {id: s, partitions: 2, drain_strategy: {type: fixed_poll, interval: 100ms}}
    policy:
      send_timeout: 2s
      max_replay_attempts: 2
      replay_budget: 0s
      backoff: {initial_interval: 20ms, max_interval: 200ms}
`, adminAddr, store, listen, maxPayload, sinkURL, run)
}

// TestRun_AccountingOfAHostileMixAcrossAKill publishes a seeded mix of good
// and bad messages (DESIGN.md §11.1, §11.3) to the embedded listener of a
// shared_outbox route on SQLite, and on DynamoDB, SIGKILLs the process
// mid-run, restarts it on the same store, and has the publisher send again what its PUBACK did
// not confirm. Then every message must have exactly the outcome its kind
// calls for: delivered (at most once per process: duplicates only across
// the kill), a dead letter whose reason names the cause (at most one per
// process), or filtered; nothing the sink or the dead letters show was
// never published; and the counters of the restarted process agree with
// what the sink and the dead letters show of it. A 3 KB topic is within the
// listener's limits (the packet limit is max_payload_bytes + 66560): it is
// routed and delivered like any other.
func TestRun_AccountingOfAHostileMixAcrossAKill(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and kills the gobridge binary")
	}
	t.Run("sqlite", func(t *testing.T) {
		testAccounting(t, fmt.Sprintf("{type: sqlite, options: {path: %q}}", filepath.Join(t.TempDir(), "outbox.db")))
	})
	t.Run("dynamodb", func(t *testing.T) { testAccounting(t, dynamoStore(t)) })
}

func testAccounting(t *testing.T, store string) {
	const n, maxPayload = 3000, 4096
	msgs, hbs := acctPlan(acctSeed, n, maxPayload), acctHeartbeats(1000)
	s := newAcctSink(t, append(slices.Clip(msgs), hbs...))
	bin := gobridgeBinary(t)
	dir := t.TempDir()
	adminAddr, listen := freeAddr(t), freeAddr(t)
	cfgPath, logPath := procFiles(t, dir, acctConfig(adminAddr, store, listen, s.srv.URL, maxPayload, 1))
	p := startProc(t, bin, cfgPath, logPath)
	waitFor(t, 20*time.Second, "the first process ready", procReady(adminAddr))

	// Phase 1: publish paced, so that the kill lands mid-stream, until
	// the connection dies with the process.
	toks := make([]paho.Token, n)
	var published atomic.Int64
	pub1 := acctPublisher(t, listen, "acct-pub-1")
	stop, exited := make(chan struct{}), make(chan struct{})
	t.Cleanup(func() { close(stop); <-exited })
	go func() {
		defer close(exited)
		pace := time.NewTicker(10 * time.Millisecond)
		defer pace.Stop()
		for i, m := range msgs {
			if i%10 == 0 {
				select {
				case <-stop:
					return
				case <-pace.C:
				}
			}
			if !pub1.IsConnectionOpen() {
				return
			}
			toks[i] = pub1.Publish(m.topic, 1, false, m.payload)
			published.Add(1)
		}
	}()
	waitFor(t, 60*time.Second, "half the messages published and some delivered", func() bool {
		return published.Load() >= n/2 && s.deliveredCount() > 0
	})
	p.kill(t)
	killedAt := time.Now()
	<-exited
	ackedFirst := map[string]bool{}
	for i, tok := range toks {
		if tok != nil && tok.WaitTimeout(30*time.Second) && tok.Error() == nil {
			ackedFirst[msgs[i].id] = true
		}
	}
	t.Logf("kill: %d published, %d acknowledged, %d delivered", published.Load(), len(ackedFirst), s.deliveredCount())

	// Phase 2: the restarted process; the publisher sends again what was
	// not acknowledged, then the rest. Every one must be acknowledged now.
	if err := os.WriteFile(cfgPath, []byte(acctConfig(adminAddr, store, listen, s.srv.URL, maxPayload, 2)), 0o644); err != nil {
		t.Fatal(err)
	}
	p = startProc(t, bin, cfgPath, logPath)
	waitFor(t, 20*time.Second, "the restarted process ready", procReady(adminAddr))
	pub2 := acctPublisher(t, listen, "acct-pub-2")
	var toks2 []paho.Token
	inRun2 := map[acctKind]int{}
	for _, m := range msgs {
		if ackedFirst[m.id] {
			continue
		}
		toks2 = append(toks2, pub2.Publish(m.topic, 1, false, m.payload))
		inRun2[m.kind]++
	}
	waitTokens(t, toks2, 60*time.Second)
	t.Logf("the restarted process acknowledged %d messages", len(toks2))

	// Every message settles: its deliveries and dead letters appear.
	// A record the sink always fails is poisoned only once the target
	// delivered something else since its first attempt (DESIGN.md §11.3),
	// so, as on a plant, traffic goes on: a heartbeat every 5th poll on a
	// key of its own while messages of the mix are unsettled.
	var dead []admin.DeadLetter
	var unsettled []string
	var hbToks []paho.Token
	for poll, deadline := 0, time.Now().Add(90*time.Second); ; poll++ {
		// The store's live count first: records it no longer holds have
		// reached the sink or the dead letters read after it.
		live := acctLive(t, adminAddr)
		dead = deadLetters(t, adminAddr, "r")
		if unsettled = acctUnsettled(msgs, s, dead); len(unsettled) == 0 {
			break
		}
		if live == 0 && !slices.ContainsFunc(hbToks, func(tok paho.Token) bool { return !tokenDone(tok) }) {
			t.Fatalf("LOST: the outbox holds nothing, yet %d acknowledged messages were neither delivered nor dead-lettered (id kind sink-requests): %s",
				len(unsettled), strings.Join(unsettled[:min(len(unsettled), 30)], ", "))
		}
		if poll%5 == 0 && len(hbToks) < len(hbs) {
			hb := hbs[len(hbToks)]
			hbToks = append(hbToks, pub2.Publish(hb.topic, 1, false, hb.payload))
		}
		if time.Now().After(deadline) {
			_, stats := httpGet(t, "http://"+adminAddr+"/api/stats")
			t.Fatalf("STALL: after 90s, %d acknowledged messages neither delivered nor dead-lettered (id kind sink-requests): %s\nstats: %s",
				len(unsettled), strings.Join(unsettled[:min(len(unsettled), 30)], ", "), stats)
		}
		time.Sleep(20 * time.Millisecond) // polling interval, not synchronisation
	}
	waitTokens(t, hbToks, 60*time.Second)
	msgs = append(msgs, hbs[:len(hbToks)]...)
	waitFor(t, 30*time.Second, "every heartbeat delivered", func() bool {
		return len(acctUnsettled(msgs, s, dead)) == 0
	})
	t.Logf("%d heartbeats published while the mix settled", len(hbToks))
	acctCheckOutcomes(t, msgs, s, dead, killedAt, ackedFirst)
	acctCheckCLI(t, bin, cfgPath, len(dead))

	// The restarted process's counters agree with what it did.
	var deadAfter, deadSentAfter int
	for _, d := range dead {
		if d.DeadAt.After(killedAt) {
			deadAfter++
			if k := acctKindOf(d.Topic); k == kindPerm || k == kindPoison {
				deadSentAfter++
			}
		}
	}
	m := func(name string, labels ...string) int { return int(metricSum(t, adminAddr, name, labels...)) }
	var got, want string
	agree := func() bool {
		s.mu.Lock()
		requests2, ok2 := s.requests["2"], s.ok["2"]
		s.mu.Unlock()
		sent, retried := m("gobridge_delivery_sent_total", `route="r"`), m("gobridge_delivery_retried_total", `route="r"`)
		got = fmt.Sprintf("received %d %d acked %d %d too_large %d filtered %d sent %d dead_lettered %d requests %d",
			m("gobridge_ingest_received_total", `receiver="edge"`), m("gobridge_route_received_total", `route="r"`),
			m("gobridge_ingest_acked_total", `receiver="edge"`), m("gobridge_route_acked_total", `route="r"`),
			m("gobridge_ingest_rejected_total", `reason="payload_too_large"`), m("gobridge_route_filtered_total", `route="r"`),
			sent, m("gobridge_delivery_dead_lettered_total", `route="r"`), sent+retried+deadSentAfter)
		p2 := len(toks2) + len(hbToks)
		want = fmt.Sprintf("received %d %d acked %d %d too_large %d filtered %d sent %d dead_lettered %d requests %d",
			p2, p2, p2, p2, inRun2[kindBig], inRun2[kindSkip], ok2, deadAfter, requests2)
		return got == want
	}
	for deadline := time.Now().Add(time.Minute); !agree(); {
		if time.Now().After(deadline) {
			t.Fatalf("MISCOUNT: the restarted process's counters disagree with the sink and the dead letters after 1m:\n got %s\nwant %s", got, want)
		}
		time.Sleep(20 * time.Millisecond) // polling interval, not synchronisation
	}
	waitFor(t, 30*time.Second, "the gauges to show the dead letters, an empty outbox and the sender up", func() bool {
		return m("gobridge_dead_letters", `route="r"`) == len(dead) && m("gobridge_outbox_pending", `session="s"`) == 0 &&
			m("gobridge_sender_up", `sender="sink"`) == 1
	})
	t.Logf("restarted process: %s", got)

	// A clean stop of the restarted process exits 0.
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.done:
	case <-time.After(60 * time.Second): // a liveness bound, not a speed check
		t.Fatal("gobridge did not exit within 60s of SIGTERM")
	}
	if p.err != nil {
		t.Fatalf("gobridge exited with %v after SIGTERM", p.err)
	}
}

// acctPublisher connects a clean-session paho client to the listener: at
// a connection loss it completes the tokens of unacknowledged messages
// with an error, so a token without one means a PUBACK.
func acctPublisher(t *testing.T, listen, id string) paho.Client {
	t.Helper()
	return publisher(t, "tcp://"+listen, id)
}

// acctUnsettled returns the messages (id, kind, requests the sink got)
// that must be delivered and were not, or must die and have no dead letter.
func acctUnsettled(msgs []acctMsg, s *acctSink, dead []admin.DeadLetter) []string {
	died := map[string]bool{}
	for _, d := range dead {
		died[d.Topic] = true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, m := range msgs {
		if m.kind.delivered() && s.delivered[m.id] == nil || acctReason[m.kind] != nil && !died[m.topic] {
			out = append(out, fmt.Sprintf("%s %s %d", m.id, m.kind, s.attempts[m.id]))
		}
	}
	return out
}

// acctCheckOutcomes checks each message's outcome against its kind.
// ackedFirst holds the messages the first process acknowledged.
func acctCheckOutcomes(t *testing.T, msgs []acctMsg, s *acctSink, dead []admin.DeadLetter, killedAt time.Time, ackedFirst map[string]bool) {
	t.Helper()
	byTopic := map[string][]admin.DeadLetter{}
	published := map[string]bool{}
	for _, m := range msgs {
		published[m.topic] = true
	}
	for _, d := range dead {
		if !published[d.Topic] {
			t.Errorf("dead letter %s of a topic never published: %.80q (%s)", d.ID, d.Topic, d.Reason)
		}
		byTopic[d.Topic] = append(byTopic[d.Topic], d)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.unknown) > 0 {
		t.Errorf("the sink got %d requests of no published message: %q", len(s.unknown), s.unknown[:min(len(s.unknown), 10)])
	}
	counts := map[string]int{}
	for _, m := range msgs {
		runs, letters := s.delivered[m.id], byTopic[m.topic]
		for run, c := range runs {
			if c > 1 {
				t.Errorf("%s (%s) delivered %d times by process %s: duplicates only across the kill", m.id, m.kind, c, run)
			}
		}
		var before, after int
		for _, d := range letters {
			if d.DeadAt.After(killedAt) {
				after++
			} else {
				before++
			}
			want := acctReason[m.kind]
			if len(want) == 0 || slices.ContainsFunc(want, func(w string) bool { return !strings.Contains(d.Reason, w) }) {
				t.Errorf("%s (%s): dead letter with reason %q, want one naming %q", m.id, m.kind, d.Reason, want)
			}
		}
		if before > 1 || after > 1 {
			t.Errorf("%s (%s): %d dead letters before the kill, %d after: at most one per process", m.id, m.kind, before, after)
		}
		if before > 0 && after > 0 && ackedFirst[m.id] {
			t.Errorf("%s (%s): dead-lettered before the kill and after, though the first process acknowledged it (sent again only if it was not)", m.id, m.kind)
		}
		switch {
		case m.kind.delivered():
			counts["delivered"]++
			if runs == nil {
				t.Errorf("LOST: %s (%s) never delivered", m.id, m.kind)
			}
		case m.kind == kindSkip:
			counts["filtered"]++
			if runs != nil || len(letters) > 0 {
				t.Errorf("%s (filtered) delivered %v, %d dead letters", m.id, runs, len(letters))
			}
		default:
			counts["dead"]++
			if runs != nil {
				t.Errorf("%s (%s) delivered %v: it must be a dead letter", m.id, m.kind, runs)
			}
			if len(letters) == 0 {
				t.Errorf("LOST: %s (%s) neither delivered nor dead-lettered", m.id, m.kind)
			}
		}
	}
	dups := 0
	for _, runs := range s.delivered {
		if len(runs) > 1 {
			dups++
		}
	}
	t.Logf("%d messages: %v; %d dead letters; %d delivered by both processes", len(msgs), counts, len(dead), dups)
}

// acctCheckCLI checks that `gobridge dlq list --format json`, reading the
// file next to the running process, lists the dead letters the API does.
func acctCheckCLI(t *testing.T, bin, cfgPath string, want int) {
	t.Helper()
	var all []admin.DeadLetter
	for after := ""; ; {
		args := []string{"dlq", "list", "-c", cfgPath, "--format", "json", "--limit", "1000"}
		if after != "" {
			args = append(args, "--after", after)
		}
		out, err := exec.Command(bin, args...).Output()
		if err != nil {
			t.Fatalf("gobridge dlq list: %v", err)
		}
		var page admin.DeadPage
		if err := json.Unmarshal(out, &page); err != nil {
			t.Fatalf("decode dlq list: %v\n%.500s", err, out)
		}
		all = append(all, page.DeadLetters...)
		if after = page.Next; after == "" {
			break
		}
	}
	if len(all) != want {
		t.Errorf("gobridge dlq list: %d dead letters, the API %d", len(all), want)
	}
	if slices.ContainsFunc(all, func(d admin.DeadLetter) bool { return d.Reason == "" }) {
		t.Error("gobridge dlq list: a dead letter without a reason")
	}
}
