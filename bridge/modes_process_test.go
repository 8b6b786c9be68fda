package bridge

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/gobridge/gobridge/internal/testservices"
)

// The tests in this file SIGKILL the gobridge binary mid-stream in each
// delivery mode and ingest path, restart it, and then require every message
// acknowledged to its publisher at the sink (DESIGN.md §1.1); duplicates
// are allowed and counted. TestRun_ZeroLossAcrossKills covers
// shared_outbox from Mosquitto, httpingest_process_test.go HTTP ingest.

// killRun is one kill test: a gobridge process on cfg, a publisher of n
// messages (msgID(i)) and a sink.
type killRun struct {
	cfg, admin string
	db         string // the SQLite outbox ("" when there is none)
	s          *sink
	n, kills   int
	// publish sends message i; its token, if not nil, must complete
	// without error before the end (the broker acknowledged it).
	publish func(i int) paho.Token
	// paused, when set, holds the publisher back while it is true.
	paused func() bool
	// acked, when set, reports whether the publisher holds nothing
	// unacknowledged any more (besides the tokens).
	acked func() bool
	// holdSends, when > 0, makes each kill land while that many sends
	// hang at the sink: they are answered 503 after the kill, so they
	// count as deliveries only once sent again.
	holdSends int
}

// gate holds the sink's requests while it is shut; the held ones are
// answered 503 (not delivered) once it opens.
type gate struct {
	mu   sync.Mutex
	shut chan struct{} // nil: open
	held atomic.Int64
}

func (g *gate) hold(string) bool {
	g.mu.Lock()
	shut := g.shut
	g.mu.Unlock()
	if shut == nil {
		return false
	}
	g.held.Add(1)
	<-shut
	return true
}

func (g *gate) close() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.held.Store(0)
	g.shut = make(chan struct{})
}

func (g *gate) open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.shut != nil {
		close(g.shut)
		g.shut = nil
	}
}

// killStats is what a killRun saw.
type killStats struct {
	dups        int   // deliveries beyond the first of a message
	liveAtKills []int // live outbox records found in the file after each kill
}

// run starts the process, publishes n messages paced (about 2,000 msg/s) so
// that the kills land mid-stream, SIGKILLs and restarts the process each
// time the sink reached another share of n, and then waits until every
// message acknowledged to the publisher reached the sink. A message that
// does not arrive fails the test with its id.
func (k killRun) run(t *testing.T) killStats {
	t.Helper()
	bin := gobridgeBinary(t)
	cfgPath, logPath := procFiles(t, t.TempDir(), k.cfg)
	waitUp := func(what string) { t.Helper(); waitFor(t, 20*time.Second, what, procReady(k.admin)) }
	g := &gate{}
	if k.holdSends > 0 {
		fail := k.s.fail
		k.s.fail = func(body string) bool { return g.hold(body) || (fail != nil && fail(body)) }
		t.Cleanup(g.open) // before the sink closes
	}
	p := startProc(t, bin, cfgPath, logPath)
	waitUp("gobridge ready")

	// The publisher goroutine is owned by the test: cleanup stops it and
	// waits for it (registered after the publisher's, so it runs first).
	toks := make([]paho.Token, k.n)
	var published atomic.Int64
	stop, exited := make(chan struct{}), make(chan struct{})
	t.Cleanup(func() { close(stop); <-exited })
	go func() {
		defer close(exited)
		pace := time.NewTicker(10 * time.Millisecond)
		defer pace.Stop()
		tick := func() bool {
			select {
			case <-stop:
				return false
			case <-pace.C:
				return true
			}
		}
		for i := range k.n {
			if i%20 == 0 && !tick() {
				return
			}
			for k.paused != nil && k.paused() {
				if !tick() {
					return
				}
			}
			toks[i] = k.publish(i)
			published.Add(1)
		}
	}()

	var st killStats
	for kill := range k.kills {
		target := int64((kill + 1) * k.n / (k.kills + 2))
		waitFor(t, 60*time.Second, fmt.Sprintf("sink reaching %d before kill %d (published %d)", target, kill+1, published.Load()),
			func() bool { return k.s.total.Load() >= target })
		if k.holdSends > 0 {
			g.close()
			waitFor(t, 30*time.Second, fmt.Sprintf("%d sends hanging at the sink before kill %d", k.holdSends, kill+1),
				func() bool { return g.held.Load() >= int64(k.holdSends) })
		}
		p.kill(t)
		g.open()
		delivered := k.s.distinct()
		if delivered == k.n {
			t.Fatalf("kill %d landed after every message was delivered: not mid-stream", kill+1)
		}
		live := k.liveRecords(t)
		st.liveAtKills = append(st.liveAtKills, live)
		t.Logf("kill %d: %d published, %d delivered, %d live records in the outbox", kill+1, published.Load(), delivered, live)
		p = startProc(t, bin, cfgPath, logPath)
		waitUp("gobridge ready after the restart")
	}
	waitFor(t, 60*time.Second, "the publisher done", func() bool { return published.Load() == int64(k.n) })
	<-exited
	deadline := time.Now().Add(60 * time.Second)
	for i, tok := range toks {
		if tok != nil && !tok.WaitTimeout(time.Until(deadline)) {
			t.Fatalf("message %s not acknowledged to the publisher within 60s", msgID(i))
		} else if tok != nil && tok.Error() != nil {
			t.Fatalf("message %s: %v", msgID(i), tok.Error())
		}
	}
	if k.acked != nil {
		waitFor(t, 60*time.Second, "the publisher holding nothing unacknowledged", k.acked)
	}
	done := time.Now()
	k.waitAll(t, 30*time.Second)
	k.s.mu.Lock()
	for _, c := range k.s.got {
		st.dups += c - 1
	}
	k.s.mu.Unlock()
	t.Logf("%d messages, %d kills: all at the sink %s after the publisher was acknowledged, %d duplicate deliveries",
		k.n, k.kills, time.Since(done).Round(time.Millisecond), st.dups)
	return st
}

// waitAll waits until every message is at the sink, and fails naming the
// ones that are not.
func (k killRun) waitAll(t *testing.T, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for k.s.distinct() < k.n && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond) // polling interval, not synchronisation
	}
	var missing []string
	k.s.mu.Lock()
	for i := range k.n {
		if k.s.got[msgID(i)] == 0 {
			missing = append(missing, msgID(i))
		}
	}
	k.s.mu.Unlock()
	if len(missing) > 0 {
		t.Fatalf("LOST: %d of %d acknowledged messages never reached the sink within %s: %s",
			len(missing), k.n, timeout, strings.Join(missing[:min(len(missing), 50)], " "))
	}
}

// liveRecords counts the live (pending or claimed) records in the outbox
// file of a killed process; 0 without one.
func (k killRun) liveRecords(t *testing.T) int {
	t.Helper()
	if k.db == "" {
		return 0
	}
	db, err := sql.Open("sqlite", "file:"+k.db+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM outbox WHERE state = 0`).Scan(&n); err != nil {
		t.Fatalf("count live records in %s: %v", k.db, err)
	}
	return n
}

// checkKeyOrder fails the test when, per key (keyOf a message's index),
// the first delivery of a message in order (the deliveries' bodies, in the
// order the target took them) comes after the first delivery of a later
// message of its key. Later duplicates do not count.
func checkKeyOrder(t *testing.T, order []string, keyOf func(i int) int) {
	t.Helper()
	seen := map[string]bool{}
	last := map[int]int{} // key -> index of its last first delivery
	bad := 0
	for _, body := range order {
		if seen[body] {
			continue
		}
		seen[body] = true
		var i int
		if _, err := fmt.Sscanf(body, "m-%d", &i); err != nil {
			t.Fatalf("unexpected body %q", body)
		}
		if prev, ok := last[keyOf(i)]; ok && i < prev {
			if bad++; bad <= 20 {
				t.Errorf("key %d: %s delivered first after %s", keyOf(i), body, msgID(prev))
			}
		}
		last[keyOf(i)] = i
	}
	if bad > 0 {
		t.Errorf("%d messages delivered first out of their key's order", bad)
	}
}

// mosquittoPublisher publishes message i on topic with QoS 1 through
// Mosquitto (which stays up: its acknowledgement is the publisher's).
func mosquittoPublisher(t *testing.T, url, id, topic string) func(int) paho.Token {
	pub := publisher(t, url, id)
	return func(i int) paho.Token { return pub.Publish(topic, 1, false, msgID(i)) }
}

// mqttReceiverConfig is a config with an mqtt receiver of Mosquitto on a
// persistent session, an HTTP sender and one route of mode (with extra
// route fields, indented as route fields).
func mqttReceiverConfig(admin, db, mqttURL, run, sinkURL, mode, extra string) string {
	stores := ""
	if db != "" {
		stores = fmt.Sprintf("stores:\n  outbox: {type: sqlite, options: {path: %q}}\n", db)
	}
	return fmt.Sprintf(`version: 1
bridge: {id: %s, admin: {listen: %q}, shutdown_timeout: 5s, log: {level: info, format: text}}
%sreceivers:
  - id: plant
    type: mqtt
    options: {broker_urls: [%s], client_id: gobridge-%s, clean_session: false, keep_alive: 5s, connect_timeout: 2s}
    topics: [{topic: "%s/#", qos: 1}]
senders:
  - {id: sink, type: http, options: {url: %q, timeout: 2s}}
routes:
  - id: r
    receiver: plant
    topic: "%s/#"
    sender: sink
    delivery_mode: %s
%s`, mode, admin, stores, mqttURL, run, run, sinkURL, run, mode, extra)
}

// TestRun_DirectHoldLosesNothingAcrossKills: direct_hold acknowledges a
// message only once the target accepted it, so the messages in flight at a
// kill stay in Mosquitto's persistent session and are redelivered.
func TestRun_DirectHoldLosesNothingAcrossKills(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and kills the gobridge binary")
	}
	mqttURL := testservices.MQTTURL(t)
	s := newSink(t)
	admin, run := freeAddr(t), fmt.Sprintf("hold-%d", time.Now().UnixNano())
	k := killRun{
		cfg: mqttReceiverConfig(admin, "", mqttURL, run, s.srv.URL, "direct_hold",
			"    policy: {send_timeout: 1s, max_in_flight: 50, backoff: {initial_interval: 100ms, max_interval: 1s}}\n"),
		admin: admin, s: s, n: 5000, kills: 2, holdSends: 20,
		publish: mosquittoPublisher(t, mqttURL, "pub-"+run, run+"/line"),
	}
	k.run(t)
}

// TestRun_DirectOrOutboxLosesNothingAcrossKills: the target fails every
// third request, so part of the messages go directly and part through the
// outbox (some are there at each kill); both parts must survive the kills.
func TestRun_DirectOrOutboxLosesNothingAcrossKills(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and kills the gobridge binary")
	}
	mqttURL := testservices.MQTTURL(t)
	s := newSink(t)
	var requests atomic.Int64
	s.fail = func(string) bool { return requests.Add(1)%3 == 0 }
	admin, run := freeAddr(t), fmt.Sprintf("fallback-%d", time.Now().UnixNano())
	db := filepath.Join(t.TempDir(), "outbox.db")
	k := killRun{
		cfg: mqttReceiverConfig(admin, db, mqttURL, run, s.srv.URL, "direct_or_outbox", `    session: {id: s, drain_strategy: {type: fixed_poll, interval: 200ms}}
    policy: {direct_timeout: 1s, send_timeout: 1s, backoff: {initial_interval: 100ms, max_interval: 1s}}
`),
		admin: admin, db: db, s: s, n: 5000, kills: 2, holdSends: 20,
		publish: mosquittoPublisher(t, mqttURL, "pub-"+run, run+"/line"),
	}
	st := k.run(t)
	if slices.Max(st.liveAtKills) == 0 {
		t.Errorf("no kill found records in the outbox (%v): the outbox part was not tested", st.liveAtKills)
	}
}

// TestRun_ListenerLosesNothingAcrossKills: a paho publisher on a
// persistent session publishes to the embedded listener, which feeds a
// shared_outbox route; after each kill the publisher reconnects and sends
// again what the listener had not acknowledged. Every message the listener
// acknowledged must reach the sink: at the end the publisher holds nothing
// unacknowledged, so every message must be there.
func TestRun_ListenerLosesNothingAcrossKills(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and kills the gobridge binary")
	}
	s := newSink(t)
	admin, listen := freeAddr(t), freeAddr(t)
	db := filepath.Join(t.TempDir(), "outbox.db")
	cfg := fmt.Sprintf(`version: 1
bridge: {id: listener-kill, admin: {listen: %q}, shutdown_timeout: 5s, log: {level: info, format: text}}
stores:
  outbox: {type: sqlite, options: {path: %q}}
receivers:
  - {id: edge, type: mqtt_listener, options: {listen: %q}, topics: [{topic: "line/#", qos: 1}]}
senders:
  - {id: sink, type: http, options: {url: %q, timeout: 2s}}
routes:
  - id: r
    receiver: edge
    topic: "line/#"
    sender: sink
    delivery_mode: shared_outbox
    session: {id: s, drain_strategy: {type: fixed_poll, interval: 200ms}}
    policy: {send_timeout: 1s, backoff: {initial_interval: 100ms, max_interval: 1s}}
`, admin, db, listen, s.srv.URL)

	store := paho.NewMemoryStore()
	o := paho.NewClientOptions().AddBroker("tcp://" + listen).SetClientID("listener-kill-pub").
		SetCleanSession(false).SetStore(store).SetAutoReconnect(true).SetMaxReconnectInterval(100 * time.Millisecond).
		SetConnectTimeout(2 * time.Second).SetMaxResumePubInFlight(1000).SetWriteTimeout(5 * time.Second)
	var reconnects atomic.Int64
	o.SetOnConnectHandler(func(paho.Client) { reconnects.Add(1) })
	pub := paho.NewClient(o)
	k := killRun{
		cfg: cfg, admin: admin, db: db, s: s, n: 5000, kills: 2,
		// The token of a message resent after a reconnect completes when
		// paho resends it, not when it is acknowledged: the store says
		// what is still unacknowledged.
		publish: func(i int) paho.Token { pub.Publish("line/1", 1, false, msgID(i)); return nil },
		acked: func() bool {
			return !slices.ContainsFunc(store.All(), func(key string) bool { return strings.HasPrefix(key, "o.") })
		},
	}
	// The publisher connects once the listener is up (run starts the
	// process first), and waits while it is disconnected.
	connected := false
	k.paused = func() bool {
		if !connected {
			if tok := pub.Connect(); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
				return true
			}
			connected = true
		}
		return !pub.IsConnectionOpen()
	}
	t.Cleanup(func() { pub.Disconnect(100) })
	k.run(t)
	t.Logf("the publisher connected %d times", reconnects.Load())
}

// TestRun_SQSFIFOKeepsGroupOrderAcrossKills: Mosquitto → shared_outbox
// with an ordering key → an SQS FIFO queue (fauxqs), killed twice. Every
// message reaches the queue and, per message group, the first deliveries
// come in publish order (a duplicate may come later, never a message
// before an earlier one of its group).
func TestRun_SQSFIFOKeepsGroupOrderAcrossKills(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and kills the gobridge binary")
	}
	mqttURL, endpoint := testservices.MQTTURL(t), testservices.SQSEndpoint(t)
	client := sqs.New(sqs.Options{Region: "us-east-1", BaseEndpoint: aws.String(endpoint), Credentials: aws.AnonymousCredentials{}})
	run := fmt.Sprintf("fifo-%d", time.Now().UnixNano())
	q, err := client.CreateQueue(t.Context(), &sqs.CreateQueueInput{
		QueueName:  aws.String(run + ".fifo"),
		Attributes: map[string]string{"FifoQueue": "true", "ContentBasedDeduplication": "false", "VisibilityTimeout": "30"},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.DeleteQueue(context.Background(), &sqs.DeleteQueueInput{QueueUrl: q.QueueUrl}) })

	// The queue's consumer records what it takes, in queue order, as a
	// sink would (it has no server of its own).
	s := &sink{got: map[string]int{}}
	ctx, cancel := context.WithCancel(context.Background())
	consumed := make(chan struct{})
	t.Cleanup(func() { cancel(); <-consumed })
	go func() {
		defer close(consumed)
		for ctx.Err() == nil {
			out, err := client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: q.QueueUrl, MaxNumberOfMessages: 10, WaitTimeSeconds: 1})
			if err != nil {
				continue // the test ended, or fauxqs hiccuped: the next receive tells
			}
			if len(out.Messages) == 0 {
				continue
			}
			// Deleted at once: a FIFO group holds back its later messages
			// while one is in flight.
			del := &sqs.DeleteMessageBatchInput{QueueUrl: q.QueueUrl}
			s.mu.Lock()
			for i, m := range out.Messages {
				s.got[*m.Body]++
				s.order = append(s.order, *m.Body)
				del.Entries = append(del.Entries, types.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: m.ReceiptHandle})
			}
			s.mu.Unlock()
			s.total.Add(int64(len(out.Messages)))
			_, _ = client.DeleteMessageBatch(ctx, del)
		}
	}()

	const groups = 8
	admin := freeAddr(t)
	db := filepath.Join(t.TempDir(), "outbox.db")
	cfg := fmt.Sprintf(`version: 1
bridge: {id: fifo, admin: {listen: %q}, shutdown_timeout: 5s, log: {level: info, format: text}}
stores:
  outbox: {type: sqlite, options: {path: %q}}
receivers:
  - id: plant
    type: mqtt
    options: {broker_urls: [%s], client_id: gobridge-%s, clean_session: false, keep_alive: 5s, connect_timeout: 2s}
    topics: [{topic: "%s/#", qos: 1}]
senders:
  - {id: queue, type: sqs, options: {queue_url: %q, endpoint: %q, region: us-east-1, message_group_id: "{topic.1}"}}
routes:
  - id: r
    receiver: plant
    topic: "%s/#"
    sender: queue
    delivery_mode: shared_outbox
    ordering_key: "{topic.1}"
    session: {id: s, drain_strategy: {type: fixed_poll, interval: 200ms}}
    policy: {send_timeout: 2s, backoff: {initial_interval: 100ms, max_interval: 1s}}
`, admin, db, mqttURL, run, run, *q.QueueUrl, endpoint, run)
	pub := publisher(t, mqttURL, "pub-"+run)
	k := killRun{
		cfg: cfg, admin: admin, db: db, s: s, n: 2000, kills: 2,
		publish: func(i int) paho.Token {
			return pub.Publish(fmt.Sprintf("%s/g%d", run, i%groups), 1, false, msgID(i))
		},
	}
	st := k.run(t)
	if slices.Max(st.liveAtKills) == 0 {
		t.Errorf("no kill found records in the outbox (%v): the kills did not land mid-stream", st.liveAtKills)
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	checkKeyOrder(t, s.order, func(i int) int { return i % groups })
	t.Logf("%d groups in order; %d duplicates in the queue", groups, st.dups)
}

// TestRun_DirectOrOutboxKeepsKeyOrderAcrossARestart: the records of a key
// that a killed process left in the outbox go before the key's later
// messages (DESIGN.md §11.6); the restarted process cannot know their keys
// from memory, so a later message must not be sent directly past them.
func TestRun_DirectOrOutboxKeepsKeyOrderAcrossARestart(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and kills the gobridge binary")
	}
	mqttURL := testservices.MQTTURL(t)
	s := newSink(t)
	var down, hang atomic.Bool
	down.Store(true)
	release := make(chan struct{})
	var releaseOnce sync.Once
	unhang := func() { releaseOnce.Do(func() { hang.Store(false); close(release) }) }
	t.Cleanup(unhang)
	const old = 10 // m-00000..m-00009 wait in the outbox at the kill
	s.fail = func(body string) bool {
		if hang.Load() && body < msgID(old) {
			<-release // the restarted process's sends of them hang
			return true
		}
		return down.Load()
	}
	admin, run := freeAddr(t), fmt.Sprintf("keyorder-%d", time.Now().UnixNano())
	db := filepath.Join(t.TempDir(), "outbox.db")
	k := killRun{db: db, cfg: mqttReceiverConfig(admin, db, mqttURL, run, s.srv.URL, "direct_or_outbox", `    ordering_key: "{topic.1}"
    session: {id: s, drain_strategy: {type: fixed_poll, interval: 200ms}}
    policy: {direct_timeout: 1s, send_timeout: 10s, backoff: {initial_interval: 100ms, max_interval: 1s}}
`)}
	bin := gobridgeBinary(t)
	cfgPath, logPath := procFiles(t, t.TempDir(), k.cfg)
	p := startProc(t, bin, cfgPath, logPath)
	waitFor(t, 20*time.Second, "gobridge ready", procReady(admin))
	pub := publisher(t, mqttURL, "pub-"+run)
	var toks []paho.Token
	for i := range old {
		toks = append(toks, pub.Publish(run+"/k", 1, false, msgID(i)))
	}
	waitTokens(t, toks, 20*time.Second)
	waitFor(t, 20*time.Second, "the target down and the messages in the outbox", func() bool { return k.liveRecords(t) == old })
	p.kill(t)
	hang.Store(true)
	down.Store(false)
	startProc(t, bin, cfgPath, logPath) // stopped at cleanup
	waitFor(t, 20*time.Second, "gobridge ready after the restart", procReady(admin))
	waitTokens(t, []paho.Token{pub.Publish(run+"/k", 1, false, msgID(old))}, 20*time.Second)
	// Mosquitto acknowledged it; once gobridge settled it, it was
	// delivered directly past the old ones (which cannot be delivered
	// before unhang) or went to the outbox behind them.
	waitFor(t, 20*time.Second, "the new message settled by gobridge", func() bool {
		_, m := httpGet(t, "http://"+admin+"/metrics")
		return strings.Contains(m, `gobridge_delivery_direct_total{route="r"} 1`) ||
			strings.Contains(m, `gobridge_delivery_fallback_total{route="r"} 1`)
	})
	unhang()
	waitFor(t, 30*time.Second, "every message at the sink", func() bool { return s.distinct() == old+1 })
	s.mu.Lock()
	defer s.mu.Unlock()
	checkKeyOrder(t, s.order, func(int) int { return 0 })
	t.Logf("deliveries: %v", s.order)
}
