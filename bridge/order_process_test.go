package bridge

// Per-key order across SIGKILLs and restarts: an SQS FIFO target's message
// groups, and direct_or_outbox's ordering keys (the kill tests of every
// mode are in modes_process_test.go).

import (
	"context"
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
