package bridge

import (
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/gobridge/gobridge/internal/testservices"
)

// TestRun_HTTPIngestAcrossKillsLosesAndDuplicatesNothing runs the gobridge
// binary with an http_listener, a SQLite outbox and a shared_outbox route
// to an SQS FIFO queue (fauxqs), and SIGKILLs it twice while producers
// POST with Idempotency-Keys. Producers retry every POST that got no
// answer (a connection error) or a 503 with the same key, until it is
// answered 200. At the end the queue holds every message exactly once, with
// the answered id as its MessageDeduplicationId: retries of committed
// messages are absorbed by the outbox, sends the killed process did not
// complete are deduplicated by the queue (fauxqs: 5 min window, like SQS).
func TestRun_HTTPIngestAcrossKillsLosesAndDuplicatesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and kills the gobridge binary")
	}
	endpoint := testservices.SQSEndpoint(t)
	client := sqs.New(sqs.Options{Region: "us-east-1", BaseEndpoint: aws.String(endpoint), Credentials: aws.AnonymousCredentials{}})
	q, err := client.CreateQueue(t.Context(), &sqs.CreateQueueInput{
		QueueName:  aws.String(fmt.Sprintf("bridge-httpkill-%d.fifo", time.Now().UnixNano())),
		Attributes: map[string]string{"FifoQueue": "true", "ContentBasedDeduplication": "false", "VisibilityTimeout": "30"},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.DeleteQueue(t.Context(), &sqs.DeleteQueueInput{QueueUrl: q.QueueUrl}) })

	bin := gobridgeBinary(t)
	dir := t.TempDir()
	admin, listen := freeAddr(t), freeAddr(t)
	const token = "producer-token"
	cfg := fmt.Sprintf(`version: 1
bridge: {id: httpkill, admin: {listen: %q}, shutdown_timeout: 5s, log: {level: info, format: text}}
stores:
  outbox: {type: sqlite, options: {path: %q}}
receivers:
  - id: web
    type: http_listener
    options: {listen: %q, token: %q, settle_timeout: 5s}
    topics: [{topic: "plant/#"}]
senders:
  - {id: queue, type: sqs, options: {queue_url: %q, endpoint: %q, region: us-east-1, message_group_id: "{topic.1}"}}
routes:
  - id: r
    receiver: web
    topic: "plant/#"
    sender: queue
    delivery_mode: shared_outbox
    ordering_key: "{topic.1}"
    session: {id: s}
    policy: {send_timeout: 5s, backoff: {initial_interval: 100ms, max_interval: 1s}}
`, admin, filepath.Join(dir, "outbox.db"), listen, token, *q.QueueUrl, endpoint)
	cfgPath, logPath := procFiles(t, dir, cfg)
	ready := procReady(admin)
	p := startProc(t, bin, cfgPath, logPath)
	waitFor(t, 20*time.Second, "gobridge ready", ready)

	const producers, per = 4, 250
	const n = producers * per
	var answered, retries atomic.Int64
	ids := make([]map[string]string, producers) // per producer: body -> answered id
	stop := make(chan struct{})
	var wg sync.WaitGroup
	t.Cleanup(func() { close(stop); wg.Wait() })
	hc := &http.Client{Timeout: 20 * time.Second, Transport: &authTransport{token: token}}
	for g := range producers {
		ids[g] = map[string]string{}
		wg.Go(func() {
			for i := range per {
				body := fmt.Sprintf("%d-%d", g, i)
				for {
					a, err := publishHTTP(hc, "http://"+listen, fmt.Sprintf("plant/line-%d", g), body, body)
					if err == nil && a.status == http.StatusOK {
						ids[g][body] = a.ID
						answered.Add(1)
						break
					}
					if err == nil && a.status != http.StatusServiceUnavailable {
						t.Errorf("POST %s: %+v", body, a)
						return
					}
					retries.Add(1)
					select { // retry pace, like a producer's backoff
					case <-stop:
						return
					case <-time.After(20 * time.Millisecond):
					}
				}
			}
		})
	}

	for k := range 2 {
		target := int64((k + 1) * n / 3)
		waitFor(t, 60*time.Second, fmt.Sprintf("%d answers before kill %d", target, k+1), func() bool { return answered.Load() >= target })
		p.kill(t)
		t.Logf("kill %d after %d answers", k+1, answered.Load())
		p = startProc(t, bin, cfgPath, logPath)
		waitFor(t, 20*time.Second, "gobridge ready again", ready)
	}
	waitFor(t, 120*time.Second, "every POST answered 200", func() bool { return answered.Load() == n })

	// Take the queue's messages until every body is there.
	got := map[string][]string{} // body -> MessageDeduplicationIds
	seen := map[string]bool{}
	take := func(wait int32) int {
		out, err := client.ReceiveMessage(t.Context(), &sqs.ReceiveMessageInput{
			QueueUrl: q.QueueUrl, MaxNumberOfMessages: 10, WaitTimeSeconds: wait, VisibilityTimeout: 5,
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll},
		})
		if err != nil {
			t.Fatalf("receive: %v", err)
		}
		for _, m := range out.Messages {
			if !seen[*m.MessageId] {
				seen[*m.MessageId] = true
				got[*m.Body] = append(got[*m.Body], m.Attributes[string(types.MessageSystemAttributeNameMessageDeduplicationId)])
			}
			if _, err := client.DeleteMessage(t.Context(), &sqs.DeleteMessageInput{QueueUrl: q.QueueUrl, ReceiptHandle: m.ReceiptHandle}); err != nil {
				t.Fatalf("delete: %v", err)
			}
		}
		return len(out.Messages)
	}
	waitFor(t, 60*time.Second, "every message in the queue", func() bool { take(1); return len(got) == n })

	// Stop gobridge cleanly, then the queue must hold nothing more.
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	<-p.done
	for take(1) > 0 {
	}
	dups := 0
	for g := range producers {
		for body, id := range ids[g] {
			dedup := got[body]
			if len(dedup) != 1 {
				dups++
				t.Errorf("%s is in the queue %d times", body, len(dedup))
				continue
			}
			if dedup[0] != id {
				t.Errorf("%s: MessageDeduplicationId %s, answered id %s", body, dedup[0], id)
			}
		}
	}
	t.Logf("%d POSTs answered 200 across 2 kills, %d retries (no answer or 503), %d duplicates in the queue", n, retries.Load(), dups)
}

// authTransport adds the bearer token to every request.
type authTransport struct{ token string }

func (a *authTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+a.token)
	if strings.HasPrefix(r.URL.Path, "/v1/publish/") {
		r.Header.Set("Content-Type", "text/plain")
	}
	return http.DefaultTransport.RoundTrip(r)
}
