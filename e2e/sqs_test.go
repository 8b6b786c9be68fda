package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/gobridge/gobridge/internal/testservices"
)

// reading is the JSON payload the FIFO test publishes.
type reading struct {
	Line  string  `json:"line"`
	Kind  string  `json:"kind"`
	Seq   int     `json:"seq"`
	Temp  float64 `json:"temp,omitempty"`
	Alarm bool    `json:"alarm,omitempty"`
}

// TestSQSFIFO_FromMosquitto runs blueprints/factory-to-sqs.yaml (topics and
// admin address made unique) as a process: QoS 1 telemetry and alarms for 4
// machines go Mosquitto -> SQLite outbox -> an SQS FIFO queue on fauxqs.
// Every JSON message arrives once, in order per machine and kind; the
// non-JSON ones are filtered; MessageGroupId is the machine and
// MessageDeduplicationId the envelope ID (the gobridge-id attribute; for
// telemetry the SHA-256 idempotency key of topic and payload).
func TestSQSFIFO_FromMosquitto(t *testing.T) {
	needBinary(t)
	mqttURL := testservices.MQTTURL(t)
	endpoint := testservices.SQSEndpoint(t)
	run := runID("e2e-fifo")
	client := sqs.New(sqs.Options{Region: "us-east-1", BaseEndpoint: aws.String(endpoint), Credentials: aws.AnonymousCredentials{}})
	q, err := client.CreateQueue(t.Context(), &sqs.CreateQueueInput{QueueName: aws.String(run + ".fifo"),
		Attributes: map[string]string{"FifoQueue": "true", "ContentBasedDeduplication": "false", "VisibilityTimeout": "30"}})
	if err != nil {
		t.Fatalf("create queue: %v", err)
	}
	queueURL := aws.ToString(q.QueueUrl)
	t.Cleanup(func() {
		// t.Context() is already cancelled when cleanups run.
		if _, err := client.DeleteQueue(context.Background(), &sqs.DeleteQueueInput{QueueUrl: q.QueueUrl}); err != nil {
			t.Logf("delete queue: %v", err)
		}
	})

	blueprint, err := os.ReadFile("../blueprints/factory-to-sqs.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg := string(blueprint)
	admin := freeAddr(t)
	for old, repl := range map[string]string{"127.0.0.1:9090": admin, "factory/": run + "/"} {
		if !strings.Contains(cfg, old) {
			t.Fatalf("blueprint no longer contains %q; update this test", old)
		}
		cfg = strings.ReplaceAll(cfg, old, repl)
	}
	dir := t.TempDir()
	b := startBridge(t, dir, "fifo", admin, cfg,
		"GOBRIDGE_ID="+run, "MQTT_URL="+mqttURL, "SQS_QUEUE_URL="+queueURL, "SQS_ENDPOINT="+endpoint,
		"AWS_REGION=us-east-1", "GOBRIDGE_OUTBOX="+dir+"/outbox.db")
	b.waitReady(t, 30*time.Second)

	// 200 telemetry readings and 20 alarms over 4 machines, plus 4 non-JSON
	// telemetry messages the blueprint's filter drops.
	const machines, readings, alarms = 4, 200, 20
	var msgs [][2]string
	want := map[string]string{} // body -> topic
	for i := range readings + alarms {
		line := fmt.Sprintf("line-%d", i%machines)
		r := reading{Line: line, Kind: "telemetry", Seq: i / machines, Temp: 20 + float64(i%7)}
		if i >= readings {
			r = reading{Line: line, Kind: "alarms", Seq: (i - readings) / machines, Alarm: true}
		}
		body, _ := json.Marshal(r)
		topic := run + "/" + line + "/" + r.Kind
		msgs = append(msgs, [2]string{topic, string(body)})
		want[string(body)] = topic
		if i%50 == 7 {
			msgs = append(msgs, [2]string{run + "/" + line + "/telemetry", "not json " + line})
		}
	}
	start := time.Now()
	publishAll(t, publisher(t, mqttURL, run+"-pub"), msgs, 30*time.Second)

	got := map[string]types.Message{}
	next := map[string]int{} // machine/kind -> next expected seq
	deadline := time.Now().Add(45 * time.Second)
	for len(got) < len(want) {
		if time.Now().After(deadline) {
			t.Fatalf("received %d of %d messages from the FIFO queue", len(got), len(want))
		}
		out, err := client.ReceiveMessage(t.Context(), &sqs.ReceiveMessageInput{
			QueueUrl: q.QueueUrl, MaxNumberOfMessages: 10, WaitTimeSeconds: 1,
			// Short: if a loaded machine makes the SDK retry a receive whose
			// first answer it lost, those messages come back in seconds.
			VisibilityTimeout:           10,
			MessageAttributeNames:       []string{"All"},
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll},
		})
		if err != nil {
			t.Fatalf("receive: %v", err)
		}
		for _, m := range out.Messages {
			body := aws.ToString(m.Body)
			topic, ok := want[body]
			if !ok {
				t.Fatalf("unexpected message %q", body)
			}
			if _, dup := got[body]; dup {
				t.Errorf("message %s received twice", body)
			}
			got[body] = m
			var r reading
			if err := json.Unmarshal([]byte(body), &r); err != nil {
				t.Fatal(err)
			}
			if k := r.Line + "/" + r.Kind; r.Seq != next[k] {
				t.Errorf("%s: got seq %d, want %d (order within the group broken)", k, r.Seq, next[k])
				next[k] = r.Seq + 1
			} else {
				next[k]++
			}
			group := m.Attributes[string(types.MessageSystemAttributeNameMessageGroupId)]
			dedup := m.Attributes[string(types.MessageSystemAttributeNameMessageDeduplicationId)]
			id := aws.ToString(m.MessageAttributes["gobridge-id"].StringValue)
			machine := aws.ToString(m.MessageAttributes["machine"].StringValue)
			if group != r.Line || machine != r.Line {
				t.Errorf("%s: MessageGroupId %q, machine attribute %q, want %q", body, group, machine, r.Line)
			}
			if id == "" || dedup != id {
				t.Errorf("%s: MessageDeduplicationId %q, gobridge-id %q: want equal, non-empty", body, dedup, id)
			}
			if r.Kind == "telemetry" {
				sum := sha256.Sum256([]byte(topic + "\x00" + body))
				if want := hex.EncodeToString(sum[:]); id != want {
					t.Errorf("%s: envelope ID %q, want the idempotency_key hash %q", body, id, want)
				}
			}
			if _, err := client.DeleteMessage(t.Context(), &sqs.DeleteMessageInput{QueueUrl: q.QueueUrl, ReceiptHandle: m.ReceiptHandle}); err != nil {
				t.Fatalf("delete: %v", err)
			}
		}
	}
	t.Logf("%d messages Mosquitto -> gobridge -> SQS FIFO in %s", len(got), time.Since(start).Round(time.Millisecond))

	out, err := client.ReceiveMessage(t.Context(), &sqs.ReceiveMessageInput{QueueUrl: q.QueueUrl, MaxNumberOfMessages: 10, WaitTimeSeconds: 1})
	if err != nil {
		t.Fatalf("receive: %v", err)
	}
	if len(out.Messages) != 0 {
		t.Errorf("queue holds %d more messages, first %q", len(out.Messages), aws.ToString(out.Messages[0].Body))
	}
	if f := b.metric("gobridge_route_filtered_total", `route="telemetry"`); f != float64(len(msgs)-len(want)) {
		t.Errorf("filtered %v messages, want %d", f, len(msgs)-len(want))
	}
}
