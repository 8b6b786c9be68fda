package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/gobridge/gobridge/internal/testservices"
	"github.com/gobridge/gobridge/stores"
)

// instanceConfig is one of several bridges sharing a $share/ subscription,
// a DynamoDB outbox and a DynamoDB lease table; its HTTP sender names the
// instance in an X-Instance header.
func instanceConfig(run, name, admin, mqttURL, ddb, sinkURL string, partitions int) string {
	return fmt.Sprintf(`version: 1
bridge:
  id: %[1]s-%[2]s
  admin: {listen: %[3]q}
  shutdown_timeout: 10s
  log: {level: info, format: text}
stores:
  outbox: {type: dynamodb, options: {table: %[1]s-outbox, region: us-east-1, endpoint: %[5]q}}
receivers:
  - id: plant
    type: mqtt
    options: {broker_urls: [%[4]q], client_id: %[1]s-%[2]s, clean_session: false, keep_alive: 5s, connect_timeout: 2s}
    topics: [{topic: "$share/%[1]s/%[1]s/+/telemetry", qos: 1}]
senders:
  - id: sink
    type: http
    options: {url: %[6]q, timeout: 2s, headers: {X-Instance: %[2]s}}
routes:
  - id: telemetry
    receiver: plant
    topic: "%[1]s/+/telemetry"
    processors: [{type: idempotency_key, from: "{payload.id}"}]
    sender: sink
    delivery_mode: shared_outbox
    session: {id: plant, partitions: %[7]d, drain_interval: 200ms}
    policy: {send_timeout: 2s, max_in_flight: 50, backoff: {initial_interval: 100ms, max_interval: 1s}}
`, run, name, admin, mqttURL, ddb, sinkURL, partitions)
}

var (
	drainingRE = regexp.MustCompile(`msg="draining partition".* partition=(\d+)`)
	stoppedRE  = regexp.MustCompile(`msg="stopped draining.* partition=(\d+)`)
)

// heldPartitions replays a bridge's log from byte offset from (0: the
// whole log; a restart appends to it) and returns the partitions it drains
// at the end.
func heldPartitions(t *testing.T, logPath string, from int) []int {
	t.Helper()
	b, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	now := map[int]bool{}
	for _, line := range strings.Split(string(b[min(from, len(b)):]), "\n") {
		if m := drainingRE.FindStringSubmatch(line); m != nil {
			n, _ := strconv.Atoi(m[1])
			now[n] = true
		} else if m := stoppedRE.FindStringSubmatch(line); m != nil {
			n, _ := strconv.Atoi(m[1])
			delete(now, n)
		}
	}
	var held []int
	for n := range now {
		held = append(held, n)
	}
	slices.Sort(held)
	return held
}

// logSize is the current length of a bridge's log.
func logSize(t *testing.T, logPath string) int {
	t.Helper()
	fi, err := os.Stat(logPath)
	if err != nil {
		t.Fatal(err)
	}
	return int(fi.Size())
}

// TestMultiInstance_KillOne runs three gobridge processes on one Mosquitto
// shared subscription and one DynamoDB outbox and lease table (6 session
// partitions, lease_ttl leaseTTL), publishes 5,000 QoS 1 messages with
// unique ids, and SIGKILLs one process midway. Every message reaches the HTTP sink (duplicates are
// counted, losses fail); the partitions the killed process held are taken
// over by the survivors once its leases lapse; every instance delivered a
// share.
func TestMultiInstance_KillOne(t *testing.T) {
	needBinary(t)
	mqttURL := testservices.MQTTURL(t)
	ddb := testservices.DynamoDBEndpoint(t)
	run := runID("e2e-multi")
	s := newSink(t)
	dir := t.TempDir()
	const partitions, n = 6, 5000 // leasedConfig's partitions

	testservices.DropTablesAtCleanup(t, ddb, run+"-outbox")

	names := []string{"b1", "b2", "b3"}
	bridges := map[string]*bridge{}
	for i, name := range names {
		admin := freeAddr(t)
		bridges[name] = startBridge(t, dir, name, admin,
			leasedConfig(run, name, admin, mqttURL, ddb, s.srv.URL))
		if i == 0 {
			// The first instance creates the tables; the others find them.
			bridges[name].waitReady(t, 60*time.Second)
		}
	}
	for _, name := range names[1:] {
		bridges[name].waitReady(t, 60*time.Second)
	}
	// Partitions spread: every instance drains some before any traffic.
	// Members rebalance only at their renewals (every leaseTTL/3): b1 hands
	// partitions over at one, a newcomer takes them at its next; when b1
	// counted the members before b3 joined it takes two rounds, about
	// leaseTTL, plus the lease calls on a loaded DynamoDB Local.
	waitFor(t, leaseTTL+time.Minute, "every instance draining a share of the partitions", func() bool {
		total := 0
		for _, name := range names {
			held := heldPartitions(t, bridges[name].logPath, 0)
			if len(held) == 0 || len(held) > (partitions+len(names)-1)/len(names)+1 {
				return false
			}
			total += len(held)
		}
		return total == partitions
	})
	for _, name := range names {
		held := heldPartitions(t, bridges[name].logPath, 0)
		t.Logf("%s drains partitions %v", name, held)
	}

	pub := publisher(t, mqttURL, run+"-pub")
	start := time.Now()
	// The test owns the publisher goroutine: when it fails early, the
	// cleanup (run before the publisher disconnects) stops it and waits.
	pubDone := make(chan []paho.Token, 1)
	stopPub, pubExited := make(chan struct{}), make(chan struct{})
	t.Cleanup(func() {
		close(stopPub)
		<-pubExited
	})
	go func() {
		defer close(pubExited)
		toks := make([]paho.Token, 0, n)
		for i := range n {
			select {
			case <-stopPub:
				return
			default:
			}
			body, _ := json.Marshal(map[string]any{"id": fmt.Sprintf("m-%05d", i), "n": i})
			toks = append(toks, pub.Publish(fmt.Sprintf("%s/line-%d/telemetry", run, i%20), 1, false, body))
		}
		pubDone <- toks
	}()

	victim := bridges["b2"]
	waitFor(t, 60*time.Second, "the sink reaching 1,500 messages", func() bool {
		_, distinct := s.counts()
		return distinct >= 1500
	})
	victimHeld := heldPartitions(t, victim.logPath, 0)
	victim.kill(t)
	killedAt := time.Now()
	_, atKill := s.counts()
	t.Logf("SIGKILLed b2 after %s with %d messages at the sink; it held partitions %v",
		killedAt.Sub(start).Round(time.Millisecond), atKill, victimHeld)
	waitTokens(t, <-pubDone, 60*time.Second)

	// The survivors take over the victim's partitions after its leases lapse.
	waitFor(t, leaseTTL+time.Minute, "the survivors draining every partition", func() bool {
		total := 0
		for _, name := range []string{"b1", "b3"} {
			held := heldPartitions(t, bridges[name].logPath, 0)
			total += len(held)
		}
		return total == partitions
	})
	t.Logf("survivors hold all %d partitions %s after the kill", partitions, time.Since(killedAt).Round(time.Millisecond))
	for _, p := range victimHeld {
		taken := false
		for _, name := range []string{"b1", "b3"} {
			held := heldPartitions(t, bridges[name].logPath, 0)
			taken = taken || slices.Contains(held, p)
		}
		if !taken {
			t.Errorf("partition %d of the killed instance is not drained by a survivor", p)
		}
	}

	// Records of the victim's partitions appended by the survivors after the
	// kill (and those the victim had left) can only go out once a survivor
	// holds their lease: some must have been delivered by b1 or b3.
	waitFor(t, 60*time.Second, "the survivors' outbox drained", func() bool {
		return bridges["b1"].metric("gobridge_outbox_pending", `session="plant"`) == 0
	})
	takenOver := 0
	for _, d := range s.deliveries()[atKill:] {
		if d.headers.Get("X-Instance") != "b2" && slices.Contains(victimHeld, stores.PartitionOf(d.key, partitions)) {
			takenOver++
		}
	}
	if takenOver == 0 {
		t.Errorf("no record of the killed instance's partitions %v was delivered by a survivor", victimHeld)
	}
	_, beforeRestart := s.counts()
	t.Logf("%d records of partitions %v delivered by the survivors; %d of %d messages at the sink before b2 restarts",
		takenOver, victimHeld, beforeRestart, n)

	// Mosquitto keeps handing a share of the $share/ group's messages to the
	// dead member's persistent session; a survivor adopts that session
	// (adopt_test.go tests it) and hands it back when b2 returns.
	restartedAt := logSize(t, victim.logPath)
	victim.start(t)
	victim.waitReady(t, leaseTTL+time.Minute)          // its instance lease may not have lapsed yet
	deadline := time.Now().Add(leaseTTL + time.Minute) // the adopter hands b2's session back at a renewal
	for {
		_, distinct := s.counts()
		pending := bridges["b1"].metric("gobridge_outbox_pending", `session="plant"`)
		if distinct == n && pending == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s: %d of %d messages at the sink, outbox pending %v",
				time.Since(start).Round(time.Second), distinct, n, pending)
		}
		time.Sleep(50 * time.Millisecond) // polling interval
	}
	elapsed := time.Since(start)
	// The partitions rebalance when it rejoins.
	waitFor(t, leaseTTL+time.Minute, "the restarted instance draining a share again", func() bool {
		return len(heldPartitions(t, victim.logPath, restartedAt)) > 0
	})
	for _, name := range names {
		from := 0
		if name == "b2" {
			from = restartedAt
		}
		t.Logf("after b2 rejoined, %s drains partitions %v", name, heldPartitions(t, bridges[name].logPath, from))
	}

	perInstance := map[string]int{}
	perID := map[string]int{}
	for _, d := range s.deliveries() {
		perInstance[d.headers.Get("X-Instance")]++
		var p struct {
			ID string `json:"id"`
		}
		if err := json.Unmarshal([]byte(d.body), &p); err != nil || p.ID != d.key {
			t.Errorf("delivery %q with Idempotency-Key %q: want the payload's id as the key", d.body, d.key)
		}
		perID[d.key]++
	}
	dups := 0
	for id, c := range perID {
		if c > 1 {
			dups += c - 1
			if dups <= 10 {
				t.Logf("duplicate: %s delivered %d times", id, c)
			}
		}
	}
	t.Logf("%d messages through 3 instances (one killed) in %s: %d duplicate deliveries; per instance %v",
		n, elapsed.Round(time.Millisecond), dups, perInstance)
	for _, name := range names {
		if perInstance[name] == 0 {
			t.Errorf("instance %s delivered nothing: partitions were not spread", name)
		}
	}
}
