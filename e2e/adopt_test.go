package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/gobridge/gobridge/internal/testservices"
	"github.com/gobridge/gobridge/stores/dynamodb"
)

// leaseTTL is the lease TTL of the tests that kill an instance of three: a
// dead instance's partitions and session are taken over about one TTL after
// it died. Every lease call must answer within a third of it (a renewal
// that has not succeeded for two thirds counts the lease lost), and
// DynamoDB Local serialises its writes: with three instances writing
// transactions of 100 items, on a loaded 2-core machine a renewal waited
// over 5 s, and the leases were lost and retaken until the tests timed out
// (the default 15s TTL, and 10s before, failed so).
const leaseTTL = 30 * time.Second

// leasedConfig is instanceConfig (6 partitions) with lease_ttl leaseTTL.
func leasedConfig(run, name, admin, mqttURL, ddb, sinkURL string) string {
	return strings.Replace(instanceConfig(run, name, admin, mqttURL, ddb, sinkURL, 6),
		"  shutdown_timeout: 10s\n", fmt.Sprintf("  shutdown_timeout: 10s\n  lease_ttl: %s\n", leaseTTL), 1)
}

// startInstances starts one bridge per name on leasedConfig and waits until
// each is ready.
func startInstances(t *testing.T, run, mqttURL, ddb, sinkURL string, names ...string) map[string]*bridge {
	t.Helper()
	dir := t.TempDir()
	testservices.DropTablesAtCleanup(t, ddb, run+"-outbox")
	bridges := map[string]*bridge{}
	for i, name := range names {
		admin := freeAddr(t)
		bridges[name] = startBridge(t, dir, name, admin, leasedConfig(run, name, admin, mqttURL, ddb, sinkURL))
		if i == 0 {
			bridges[name].waitReady(t, 60*time.Second) // it creates the table
		}
	}
	for _, name := range names[1:] {
		bridges[name].waitReady(t, 60*time.Second)
	}
	return bridges
}

// publishPaced publishes n QoS 1 messages with ids prefix-00000 ... at about
// perSec a second, from a goroutine the test owns; the channel yields their
// tokens once all are published, and sent counts them as they go.
func publishPaced(t *testing.T, pub paho.Client, run, prefix string, n, perSec int, sent *atomic.Int64) <-chan []paho.Token {
	t.Helper()
	out := make(chan []paho.Token, 1)
	stop, exited := make(chan struct{}), make(chan struct{})
	t.Cleanup(func() {
		close(stop)
		<-exited
	})
	go func() {
		defer close(exited)
		tick := time.NewTicker(10 * time.Millisecond) // pacing, not synchronisation
		defer tick.Stop()
		toks := make([]paho.Token, 0, n)
		for i := 0; i < n; {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			for end := min(n, i+perSec/100); i < end; i++ {
				body, _ := json.Marshal(map[string]any{"id": fmt.Sprintf("%s-%05d", prefix, i), "n": i})
				toks = append(toks, pub.Publish(fmt.Sprintf("%s/line-%d/telemetry", run, i%20), 1, false, body))
				sent.Add(1)
			}
		}
		out <- toks
	}()
	return out
}

// sumMetric adds a metric over some bridges. A /metrics that cannot be
// read (a scrape past httpClient's timeout on a loaded machine) is read
// again, not added as -1: -1 + 1 is 0, which reads as "the adopter let the
// session go" while it still holds it. It returns -1 when one stays
// unreadable for 30 s.
func sumMetric(bridges map[string]*bridge, names []string, metric string, labels ...string) float64 {
	var sum float64
	for _, name := range names {
		v := bridges[name].metric(metric, labels...)
		for deadline := time.Now().Add(30 * time.Second); v < 0 && time.Now().Before(deadline); {
			time.Sleep(100 * time.Millisecond) // polling interval
			v = bridges[name].metric(metric, labels...)
		}
		if v < 0 {
			return -1
		}
		sum += v
	}
	return sum
}

// logCount counts the lines of a bridge's log that contain every one of
// subs.
func logCount(t *testing.T, b *bridge, subs ...string) int {
	t.Helper()
	data, err := os.ReadFile(b.logPath)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(string(data), "\n") {
		all := true
		for _, sub := range subs {
			all = all && strings.Contains(line, sub)
		}
		if all {
			n++
		}
	}
	return n
}

// waitDistinct waits until the sink holds want distinct messages, and
// returns how long that took.
func waitDistinct(t *testing.T, s *sink, want int, timeout time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	deadline := start.Add(timeout)
	for {
		_, distinct := s.counts()
		if distinct >= want {
			return time.Since(start)
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s: %d of %d messages at the sink", timeout, distinct, want)
		}
		time.Sleep(50 * time.Millisecond) // polling interval
	}
}

// TestMultiInstance_DeadInstanceSessionIsAdoptedAndHandedBack runs three
// gobridge processes on one $share subscription with persistent sessions
// and a DynamoDB outbox (lease_ttl leaseTTL), publishes 6,000 QoS 1
// messages at about 1,500/s and SIGKILLs one process midway, for good.
// Mosquitto keeps queueing the dead member's share in its session; a
// survivor adopts that session once its lease lapses and commits what it
// holds, so every PUBACKed message reaches the target without the dead
// instance: the bound is one lease TTL (its lease lapsing) plus one renewal
// period (a survivor noticing) plus the drain; the test asserts
// completeness and logs the time. Then the killed instance is restarted
// while 4,000 more messages flow: it asks for its session back, the adopter
// lets go at its next renewal (disconnecting first), the owner connects and
// reads again (600 more messages, published once the adopter let go, reach
// it); no message is lost across the handover, and the broker never
// kicks a client off (no session takeover). Duplicates are counted and
// logged.
func TestMultiInstance_DeadInstanceSessionIsAdoptedAndHandedBack(t *testing.T) {
	needBinary(t)
	mqttURL := testservices.MQTTURL(t)
	ddb := testservices.DynamoDBEndpoint(t)
	run := runID("e2e-adopt")
	s := newSink(t)
	names := []string{"b1", "b2", "b3"}
	bridges := startInstances(t, run, mqttURL, ddb, s.srv.URL, names...)
	survivors := []string{"b1", "b3"}

	pub := publisher(t, mqttURL, run+"-pub")
	const n, m, k = 6000, 4000, 600
	start := time.Now()
	var sent atomic.Int64
	first := publishPaced(t, pub, run, "a", n, 1500, &sent)
	// Killed while the broker hands it messages: what follows for its
	// session is queued there.
	waitFor(t, 60*time.Second, "2,000 messages published", func() bool { return sent.Load() >= 2000 })
	victim := bridges["b2"]
	victim.kill(t)
	_, atKill := s.counts()
	t.Logf("SIGKILLed b2 %s after the first publish, with %d messages published and %d at the sink",
		time.Since(start).Round(time.Millisecond), sent.Load(), atKill)
	waitTokens(t, <-first, 60*time.Second)

	took := waitDistinct(t, s, n, leaseTTL+2*time.Minute)
	t.Logf("all %d PUBACKed messages delivered %s after the last PUBACK (bound: lease TTL %s + a renewal + the drain)",
		n, took.Round(time.Millisecond), leaseTTL)
	if got := sumMetric(bridges, survivors, "gobridge_receiver_adopted_sessions"); got != 1 {
		t.Errorf("the survivors run %v adopted sessions, want 1", got)
	}

	// The owner comes back while messages flow.
	restartedAt := logSize(t, victim.logPath)
	second := publishPaced(t, pub, run, "b", m, 1000, &sent)
	waitFor(t, 30*time.Second, "the second stream under way", func() bool {
		_, distinct := s.counts()
		return distinct >= n+500
	})
	victim.start(t)
	restarted := time.Now()
	// Ready once it runs its own session: it may first wait for its old
	// instance lease to lapse (renewed every leaseTTL/3, so up to a renewal
	// period after the adoption), then the adopter lets go at its next
	// renewal and b2 takes the session at its own: three renewal periods,
	// a whole leaseTTL, plus the lease calls on a loaded DynamoDB Local.
	victim.waitReady(t, leaseTTL+time.Minute)
	waitFor(t, leaseTTL+30*time.Second, "the adopter letting the session go", func() bool {
		return sumMetric(bridges, survivors, "gobridge_receiver_adopted_sessions") == 0
	})
	t.Logf("b2 has its session back %s after its restart", time.Since(restarted).Round(time.Millisecond))
	waitTokens(t, <-second, 60*time.Second)
	waitDistinct(t, s, n+m, 120*time.Second)
	// The handover takes up to a renewal period (a third of the TTL),
	// longer than the second stream: what b2 reads of its own is checked
	// on a third stream, published once it holds its session again.
	third := publishPaced(t, pub, run, "c", k, 1000, &sent)
	waitTokens(t, <-third, 60*time.Second)
	waitDistinct(t, s, n+m+k, 120*time.Second)
	waitFor(t, 30*time.Second, "b2 reading its own session again", func() bool {
		return victim.metric("gobridge_ingest_received_total", `receiver="plant"`) > 0
	})
	log, err := os.ReadFile(victim.logPath)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(log[restartedAt:]), "asking for it back") {
		t.Errorf("b2 did not ask for its session back after the restart")
	}
	for _, name := range names {
		if c := logCount(t, bridges[name], `msg="connection lost"`); c > 0 {
			t.Errorf("%s lost its broker connection %d times: a session was taken over by a second CONNECT", name, c)
		}
	}
	total, distinct := s.counts()
	t.Logf("%d messages, %d deliveries: %d duplicates across the kill, the adoption and the handover", n+m+k, total, total-distinct)
	if distinct != n+m+k {
		t.Errorf("%d distinct messages at the sink, want %d", distinct, n+m+k)
	}
}

// TestMultiInstance_OneSurvivorAdoptsADeadSession kills one of three
// instances: both survivors race for its session's lease once it lapses,
// and exactly one wins and connects with its client id. The other never
// connects with it (the broker would kick one of them off in turn), the
// lease keeps one owner over several renewals, and the adopted session
// delivers what the broker queued for it.
func TestMultiInstance_OneSurvivorAdoptsADeadSession(t *testing.T) {
	needBinary(t)
	mqttURL := testservices.MQTTURL(t)
	ddb := testservices.DynamoDBEndpoint(t)
	run := runID("e2e-race")
	s := newSink(t)
	names := []string{"b1", "b2", "b3"}
	bridges := startInstances(t, run, mqttURL, ddb, s.srv.URL, names...)
	survivors := []string{"b1", "b3"}

	bridges["b2"].kill(t)
	// What Mosquitto queues for the dead member's session from now on
	// reaches the target only through its adopter.
	pub := publisher(t, mqttURL, run+"-pub")
	const n = 600
	var sent atomic.Int64
	waitTokens(t, <-publishPaced(t, pub, run, "r", n, 3000, &sent), 30*time.Second)
	waitDistinct(t, s, n, leaseTTL+time.Minute) // adopted about one TTL after b2 died
	if got := sumMetric(bridges, survivors, "gobridge_receiver_adopted_sessions"); got != 1 {
		t.Fatalf("the survivors run %v adopted sessions, want 1", got)
	}
	st, err := dynamodb.Open(t.Context(), dynamodb.Options{Table: run + "-outbox", Region: "us-east-1", Endpoint: ddb})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	prefix := "mqtt/" + strings.TrimPrefix(mqttURL, "tcp://") + "/plant/"
	owner := func() string {
		ls, err := st.List(t.Context(), prefix+run+"-b2", time.Now())
		if err != nil || len(ls) != 1 {
			return fmt.Sprintf("%v %v", ls, err)
		}
		return ls[0].Owner
	}
	holder := owner()
	if !strings.HasPrefix(holder, run+"-b1/") && !strings.HasPrefix(holder, run+"-b3/") {
		t.Fatalf("b2's session lease is held by %q, want a survivor", holder)
	}
	// Watch three renewal periods past the adoption: one holder, one session.
	watch := time.Now().Add(leaseTTL)
	for time.Now().Before(watch) {
		if got := sumMetric(bridges, survivors, "gobridge_receiver_adopted_sessions"); got != 1 {
			t.Fatalf("the survivors run %v adopted sessions, want 1", got)
		}
		if got := owner(); got != holder {
			t.Fatalf("b2's session lease moved from %s to %s", holder, got)
		}
		time.Sleep(100 * time.Millisecond) // polling interval
	}
	adopters := 0
	for _, name := range survivors {
		if logCount(t, bridges[name], "adopting the session of an instance that is gone", "client_id="+run+"-b2 ") > 0 {
			adopters++
		}
		if c := logCount(t, bridges[name], `msg="connection lost"`); c > 0 {
			t.Errorf("%s lost its broker connection %d times: two clients used one client id", name, c)
		}
	}
	if adopters != 1 {
		t.Errorf("%d survivors adopted b2's session, want 1", adopters)
	}
	t.Logf("b2's session adopted by %s; all %d messages delivered", holder, n)
}
