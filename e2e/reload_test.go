package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/gobridge/gobridge/internal/testservices"
)

// reloadConfig is a bridge with a client of Mosquitto (plant) and an
// embedded listener (edge) at edgeAddr, a SQLite outbox in dir, the admin
// token from $E2E_ADMIN_TOKEN, and the given senders and routes.
func reloadConfig(id, admin, dir, mqttURL, run, edgeAddr, senders, routesYAML string) string {
	return fmt.Sprintf(`version: 1
bridge:
  id: %s
  admin: {listen: %q, token: "${E2E_ADMIN_TOKEN}"}
  shutdown_timeout: 10s
  log: {level: info, format: text}
stores: {outbox: {type: sqlite, options: {path: %q}}}
receivers:
  - id: plant
    type: mqtt
    options: {broker_urls: [%q], client_id: %s, clean_session: false, keep_alive: 5s, connect_timeout: 2s}
    topics: [{topic: "%s/#", qos: 1}]
  - {id: edge, type: mqtt_listener, options: {listen: %q}, topics: [{topic: "edge/#", qos: 1}]}
senders:
%s
routes:
%s
`, id, admin, dir+"/outbox.db", mqttURL, run, run, edgeAddr, senders, routesYAML)
}

// bodies counts the sink's deliveries by body.
func bodies(s *sink) map[string]int {
	got := map[string]int{}
	for _, d := range s.deliveries() {
		got[d.body]++
	}
	return got
}

// steady publishes "a-N" to topic at QoS 1 every 2ms until halted, and
// keeps each publication's token (completed when the broker acknowledged
// it).
type steady struct {
	stop, done chan struct{}
	mu         sync.Mutex
	toks       map[string]paho.Token
}

func publishSteadily(c paho.Client, topic string) *steady {
	s := &steady{stop: make(chan struct{}), done: make(chan struct{}), toks: map[string]paho.Token{}}
	go func() {
		defer close(s.done)
		tick := time.NewTicker(2 * time.Millisecond) // the publishing rate
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-s.stop:
				return
			case <-tick.C:
			}
			p := fmt.Sprintf("a-%05d", i)
			tok := c.Publish(topic, 1, false, p)
			s.mu.Lock()
			s.toks[p] = tok
			s.mu.Unlock()
		}
	}()
	return s
}

// acked halts the publisher and returns what the broker acknowledged.
func (s *steady) acked(t *testing.T) []string {
	t.Helper()
	close(s.stop)
	<-s.done
	var out []string
	for p, tok := range s.toks {
		if tok.WaitTimeout(20*time.Second) && tok.Error() == nil {
			out = append(out, p)
		}
	}
	return out
}

// reloadOverHTTP posts /api/reload with token ("" for none) and returns
// the status and the decoded answer.
func reloadOverHTTP(t *testing.T, admin, token string) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, "http://"+admin+"/api/reload", nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := (&http.Client{Timeout: 60 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("POST /api/reload: %v", err)
	}
	defer resp.Body.Close()
	var body map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&body)
	return resp.StatusCode, body
}

// TestReload_SIGHUPAppliesByDifference runs gobridge on Mosquitto and an
// embedded listener while a publisher sends to route A at a steady rate,
// and reloads it with SIGHUP: A's sender gets another URL, route B is
// added and route C removed. The process keeps its PID, every message of A
// the broker acknowledged is delivered, B gets what is published after the
// reload, and the listener's publisher (the listener did not change) stays
// connected. Then, while publishing: an invalid file changes nothing and
// loses nothing; a refused change (bridge.id) over POST /api/reload is
// answered 409 with its reason and changes nothing; the reload endpoint
// needs the admin token; a reload of an unchanged file over it succeeds,
// and the unchanged MQTT connection never reconnected.
func TestReload_SIGHUPAppliesByDifference(t *testing.T) {
	needBinary(t)
	mqttURL := testservices.MQTTURL(t)
	run := runID("e2e-reload")
	a1, a2, bSink, cSink := newSink(t), newSink(t), newSink(t), newSink(t)
	admin, edge, dir := freeAddr(t), freeAddr(t), t.TempDir()
	const token = "reload-test-token"
	routeA := fmt.Sprintf(`
  - {id: A, receiver: plant, topic: "%[1]s/a/#", sender: s, delivery_mode: shared_outbox,
     session: {id: s, drain_strategy: {type: fixed_poll, interval: 100ms}}}
  - {id: E, receiver: edge, topic: "edge/#", sender: s}`, run)
	before := reloadConfig(run, admin, dir, mqttURL, run, edge, fmt.Sprintf(`
  - {id: s, type: http, options: {url: %q}}
  - {id: c, type: http, options: {url: %q}}`, a1.srv.URL, cSink.srv.URL), routeA+fmt.Sprintf(`
  - {id: C, receiver: plant, topic: "%s/c/#", sender: c}`, run))
	after := reloadConfig(run, admin, dir, mqttURL, run, edge, fmt.Sprintf(`
  - {id: s, type: http, options: {url: %q}}
  - {id: b, type: http, options: {url: %q}}`, a2.srv.URL, bSink.srv.URL), routeA+fmt.Sprintf(`
  - {id: B, receiver: plant, topic: "%s/b/#", sender: b}`, run))
	br := startBridge(t, dir, "reload", admin, before, "E2E_ADMIN_TOKEN="+token)
	br.waitReady(t, 30*time.Second)
	pid := br.cmd.Process.Pid

	pub := publisher(t, mqttURL, run+"-pub")
	var edgeLost atomic.Int64
	edgePub := paho.NewClient(paho.NewClientOptions().AddBroker("tcp://" + edge).SetClientID(run + "-edge").
		SetAutoReconnect(false).SetConnectionLostHandler(func(paho.Client, error) { edgeLost.Add(1) }))
	if tok := edgePub.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("connect to the listener: %v", tok.Error())
	}
	t.Cleanup(func() { edgePub.Disconnect(100) })
	publishAll(t, pub, [][2]string{{run + "/c/x", "c-before"}}, 10*time.Second)
	waitFor(t, 10*time.Second, "route C", func() bool { return bodies(cSink)["c-before"] == 1 })

	st := publishSteadily(pub, run+"/a/x")
	waitFor(t, 20*time.Second, "route A delivering", func() bool { return len(a1.deliveries()) > 50 })
	if err := os.WriteFile(br.cfgPath, []byte(after), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := br.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the reload", func() bool {
		return br.metric("gobridge_config_reloads_total", `result="ok"`) == 1
	})
	publishAll(t, pub, [][2]string{{run + "/b/x", "b-after"}, {run + "/c/x", "c-after"}, {run + "/a/x", "a-after"}}, 10*time.Second)
	waitToken := edgePub.Publish("edge/x", 1, false, "edge-after")
	if !waitToken.WaitTimeout(10*time.Second) || waitToken.Error() != nil {
		t.Fatalf("publish to the listener after the reload: %v", waitToken.Error())
	}
	waitFor(t, 20*time.Second, "route B", func() bool { return bodies(bSink)["b-after"] == 1 })
	waitFor(t, 20*time.Second, "A's new sender", func() bool { return bodies(a2)["a-after"] == 1 })
	waitFor(t, 20*time.Second, "the listener's route on the new sender", func() bool { return bodies(a2)["edge-after"] == 1 })

	// An invalid file while publishing: nothing changes, nothing is lost.
	if err := os.WriteFile(br.cfgPath, []byte(after+"bogus_key: 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := br.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the failed reload", func() bool {
		return br.metric("gobridge_config_reloads_total", `result="error"`) == 1
	})
	// A refused change over the API, while publishing.
	refused := strings.Replace(after, "id: "+run+"\n", "id: "+run+"-renamed\n", 1)
	if err := os.WriteFile(br.cfgPath, []byte(refused), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _ := reloadOverHTTP(t, admin, ""); code != http.StatusUnauthorized {
		t.Errorf("POST /api/reload without the token: %d, want 401", code)
	}
	code, body := reloadOverHTTP(t, admin, token)
	if msg, _ := body["error"].(string); code != http.StatusConflict || !strings.Contains(msg, "bridge.id changed") {
		t.Errorf("refused reload: %d %v, want 409 naming bridge.id", code, body)
	}
	if n := br.metric("gobridge_config_reloads_total", `result="error"`); n != 2 {
		t.Errorf("reload errors counted: %v, want 2", n)
	}
	publishAll(t, pub, [][2]string{{run + "/b/x", "b-still"}}, 10*time.Second)
	waitFor(t, 20*time.Second, "route B after the failed reloads", func() bool { return bodies(bSink)["b-still"] == 1 })
	if err := os.WriteFile(br.cfgPath, []byte(after), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, body := reloadOverHTTP(t, admin, token); code != http.StatusOK || body["result"] != "ok" {
		t.Errorf("reload of an unchanged config over the API: %d %v", code, body)
	}
	if n := br.metric("gobridge_receiver_reconnects_total", `receiver="plant"`); n != 0 {
		t.Errorf("the unchanged mqtt receiver reconnected %v times", n)
	}

	acked := st.acked(t)
	waitFor(t, 60*time.Second, "every acknowledged message of A", func() bool {
		got1, got2 := bodies(a1), bodies(a2)
		for _, p := range acked {
			if got1[p]+got2[p] == 0 {
				return false
			}
		}
		return true
	})
	if bodies(cSink)["c-after"] != 0 {
		t.Error("removed route C still delivers")
	}
	if bodies(a1)["a-after"] != 0 || bodies(a1)["edge-after"] != 0 {
		t.Error("a message published after the reload went to the old sender")
	}
	select {
	case <-br.done:
		t.Fatalf("gobridge exited: %v", br.err)
	default:
	}
	if br.cmd.Process.Pid != pid || syscall.Kill(pid, 0) != nil {
		t.Fatal("the process was replaced")
	}
	if n := edgeLost.Load(); n != 0 || !edgePub.IsConnectionOpen() {
		t.Fatalf("the listener's publisher lost its connection %d times", n)
	}
	log := tail(br.logPath, 400)
	for _, want := range []string{"config reloaded", "config reload failed", "bogus_key", "restart gobridge to apply it"} {
		if !strings.Contains(log, want) {
			t.Errorf("the log does not say %q", want)
		}
	}
	t.Logf("%d messages of A acknowledged by the broker: %d delivered through the old sender, %d through the new",
		len(acked), len(bodies(a1)), len(bodies(a2)))
}
