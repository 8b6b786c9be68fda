package bridge

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/gobridge/gobridge/internal/testservices"
)

var buildOnce struct {
	sync.Once
	dir  string
	path string
	err  error
	out  []byte
}

// TestMain removes the gobridge binary a test built (38 MB per run).
func TestMain(m *testing.M) {
	code := m.Run()
	if buildOnce.dir != "" {
		_ = os.RemoveAll(buildOnce.dir)
	}
	os.Exit(code)
}

// gobridgeBinary builds cmd/gobridge once per test process.
func gobridgeBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "gobridge-bin-")
		if err != nil {
			buildOnce.err = err
			return
		}
		buildOnce.dir, buildOnce.path = dir, filepath.Join(dir, "gobridge")
		cmd := exec.Command("go", "build", "-o", buildOnce.path, "../cmd/gobridge")
		buildOnce.out, buildOnce.err = cmd.CombinedOutput()
	})
	if buildOnce.err != nil {
		t.Fatalf("build gobridge: %v\n%s", buildOnce.err, buildOnce.out)
	}
	return buildOnce.path
}

// bridgeProc is one gobridge process.
type bridgeProc struct {
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

func startProc(t *testing.T, bin, cfgPath, logPath string) *bridgeProc {
	t.Helper()
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "run", "-c", cfgPath)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &bridgeProc{cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		_ = logf.Close()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

func (p *bridgeProc) kill(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-p.done
}

// procFiles writes a process's config into dir and returns its path and
// the process's log file; the log's tail is printed if the test fails.
func procFiles(t *testing.T, dir, cfg string) (cfgPath, logPath string) {
	t.Helper()
	cfgPath, logPath = filepath.Join(dir, "bridge.yaml"), filepath.Join(dir, "bridge.log")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("bridge log tail:\n%s", tailFile(logPath, 40))
		}
	})
	return cfgPath, logPath
}

// procReady reports whether the admin API at addr answers /readyz with 200.
func procReady(addr string) func() bool {
	return func() bool { c, err := httpStatus("http://" + addr + "/readyz"); return err == nil && c == 200 }
}

func tailFile(path string, n int) string {
	b, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// TestRun_ZeroLossAcrossKills publishes 50,000 QoS 1 messages through
// Mosquitto into a shared_outbox route on SQLite while the gobridge process
// is SIGKILLed and restarted three times; every message must reach the
// sink once the last restart is ready and the publisher done, well before
// lease_ttl (10 m): the claims of a killed process are void at once
// (DESIGN.md §11.2).
func TestRun_ZeroLossAcrossKills(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and kills the gobridge binary")
	}
	mqttURL := testservices.MQTTURL(t)
	bin := gobridgeBinary(t)
	dir := t.TempDir()
	s := newSink(t)
	admin := freeAddr(t)
	run := fmt.Sprintf("crash-%d", time.Now().UnixNano())
	cfg := fmt.Sprintf(`version: 1
bridge:
  id: crash
  admin: {listen: %q}
  shutdown_timeout: 10s
  lease_ttl: 10m
  log: {level: info, format: text}
stores:
  outbox: {type: sqlite, options: {path: %q}}
receivers:
  - id: plant
    type: mqtt
    options:
      broker_urls: [%s]
      client_id: gobridge-%s
      clean_session: false
      keep_alive: 5s
      connect_timeout: 2s
    topics: [{topic: "%s/#", qos: 1}]
senders:
  - {id: sink, type: http, options: {url: %q, timeout: 2s}}
routes:
  - id: crash
    receiver: plant
    topic: "%s/#"
    sender: sink
    delivery_mode: shared_outbox
    session: {id: crash, drain_strategy: {type: fixed_poll, interval: 200ms}}
    policy: {send_timeout: 1s, backoff: {initial_interval: 100ms, max_interval: 1s}}
`, admin, filepath.Join(dir, "outbox.db"), mqttURL, run, run, s.srv.URL, run)
	cfgPath, logPath := procFiles(t, dir, cfg)
	waitUp := func() { t.Helper(); waitFor(t, 20*time.Second, "bridge ready", procReady(admin)) }
	p := startProc(t, bin, cfgPath, logPath)
	waitUp()

	const n = 50_000
	pub := publisher(t, mqttURL, "pub-"+run)
	// The publisher goroutine is owned by the test: a failing test stops it
	// and its cleanup waits for it (registered after publisher's, so it runs
	// before the client disconnects).
	pubDone := make(chan []paho.Token, 1)
	stopPub := make(chan struct{})
	pubExited := make(chan struct{})
	t.Cleanup(func() {
		close(stopPub)
		<-pubExited
	})
	var published atomic.Int64
	go func() {
		defer close(pubExited)
		var toks []paho.Token
		pace := time.NewTicker(20 * time.Millisecond) // pace: ~2.5k msg/s, so the kills land mid-publish
		defer pace.Stop()
		for i := range n {
			toks = append(toks, pub.Publish(run+"/line", 1, false, msgID(i)))
			published.Add(1)
			if i%50 == 49 {
				select {
				case <-stopPub:
					return
				case <-pace.C:
				}
			}
		}
		pubDone <- toks
	}()

	const kills = 3
	for k := range kills {
		// Let some messages flow, then kill mid-stream.
		target := int64((k + 1) * n / (kills + 2))
		waitFor(t, 60*time.Second, fmt.Sprintf("sink reaching %d before kill %d (published %d)", target, k+1, published.Load()), func() bool {
			return s.total.Load() >= target
		})
		p.kill(t)
		t.Logf("kill %d: %d published, %d delivered", k+1, published.Load(), s.total.Load())
		p = startProc(t, bin, cfgPath, logPath)
	}
	waitUp()
	toks := <-pubDone
	waitTokens(t, toks, 60*time.Second) // every message acknowledged by the broker to the publisher
	done := time.Now()
	waitFor(t, 2*time.Minute, "every message at the sink (a lease or claim of a killed process that was not void would hold its records for lease_ttl, 10 m)",
		func() bool { return s.distinct() == n })
	t.Logf("every message at the sink %s after the publisher was done", time.Since(done).Round(time.Millisecond))
	s.mu.Lock()
	dups := 0
	for _, c := range s.got {
		dups += c - 1
	}
	s.mu.Unlock()
	t.Logf("%d messages, %d kills, %d duplicate deliveries (at-least-once)", n, kills, dups)

	// A clean shutdown exits 0.
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.done:
	case <-time.After(15 * time.Second):
		t.Fatal("gobridge did not exit within 15s of SIGTERM")
	}
	if p.err != nil {
		t.Fatalf("gobridge exited with %v after SIGTERM", p.err)
	}
}

// TestRun_ClaimsOfAKilledProcessAreDeliveredAtOnce kills (SIGKILL) a gobridge
// process while the records it claimed hang at the target, and restarts it
// on the same SQLite file: the new process voids the dead one's claims at
// once (its leases end when it takes the file) and delivers every record
// (DESIGN.md §11.2), not after lease_ttl (10 m here) or a claim timeout.
func TestRun_ClaimsOfAKilledProcessAreDeliveredAtOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and kills the gobridge binary")
	}
	bin := gobridgeBinary(t)
	dir := t.TempDir()
	s := newSink(t)
	var holding atomic.Bool
	holding.Store(true)
	release := make(chan struct{})
	var held atomic.Int64
	s.hook = func(string) {
		if holding.Load() {
			held.Add(1)
			<-release // the first process's sends hang until it is killed
		}
	}
	t.Cleanup(func() { holding.Store(false); close(release) })
	admin, listen := freeAddr(t), freeAddr(t)
	cfg := fmt.Sprintf(`version: 1
bridge: {id: claims, admin: {listen: %q}, shutdown_timeout: 5s, lease_ttl: 10m, log: {level: info, format: text}}
stores:
  outbox: {type: sqlite, options: {path: %q}}
receivers:
  - {id: edge, type: mqtt_listener, options: {listen: %q}, topics: [{topic: "#", qos: 1}]}
senders:
  - {id: sink, type: http, options: {url: %q, timeout: 60s}}
routes:
  - id: r
    receiver: edge
    topic: "#"
    sender: sink
    delivery_mode: shared_outbox
    session: {id: s}
    policy: {send_timeout: 60s, max_in_flight: 10}
`, admin, filepath.Join(dir, "outbox.db"), listen, s.srv.URL)
	cfgPath, logPath := procFiles(t, dir, cfg)
	ready := procReady(admin)
	p := startProc(t, bin, cfgPath, logPath)
	waitFor(t, 20*time.Second, "the first process ready", ready)
	const n = 200
	pub := publisher(t, "tcp://"+listen, "claims-pub")
	var toks []paho.Token
	for i := range n {
		toks = append(toks, pub.Publish("line/1", 1, false, msgID(i)))
	}
	waitTokens(t, toks, 30*time.Second) // acknowledged: committed, and claimed by the first process
	waitFor(t, 20*time.Second, "sends hanging at the target", func() bool { return held.Load() >= 5 })
	p.kill(t)
	holding.Store(false)

	p = startProc(t, bin, cfgPath, logPath)
	waitFor(t, 20*time.Second, "the restarted process ready", ready)
	readyAt := time.Now()
	waitFor(t, 2*time.Minute, "every record delivered (claims of the killed process that were not void would hold them for lease_ttl, 10 m)",
		func() bool { return s.distinct() == n })
	t.Logf("%d records delivered %s after the restart was ready (%d hung in the killed process)",
		n, time.Since(readyAt).Round(time.Millisecond), held.Load())
	_ = p
}
