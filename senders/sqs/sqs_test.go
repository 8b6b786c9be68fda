package sqs

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/gobridge/gobridge/internal/testservices"
	"github.com/gobridge/gobridge/message"
	"github.com/gobridge/gobridge/routes"
	"github.com/gobridge/gobridge/senders"
)

// fauxqs is a test queue on the SQS emulator.
type fauxqs struct {
	endpoint string
	client   *sqs.Client
	queueURL string
}

func newQueue(t testing.TB, fifo bool) *fauxqs {
	t.Helper()
	endpoint := testservices.SQSEndpoint(t)
	client := sqs.New(sqs.Options{Region: "us-east-1", BaseEndpoint: aws.String(endpoint), Credentials: aws.AnonymousCredentials{}})
	var b [6]byte
	rand.Read(b[:])
	name := "senders-" + strings.NewReplacer("/", "-", "_", "-").Replace(strings.ToLower(t.Name())) + "-" + hex.EncodeToString(b[:])
	if len(name) > 70 {
		name = name[len(name)-70:]
	}
	attrs := map[string]string{"VisibilityTimeout": "30"}
	if fifo {
		name += ".fifo"
		attrs["FifoQueue"] = "true"
		attrs["ContentBasedDeduplication"] = "false"
	}
	out, err := client.CreateQueue(t.Context(), &sqs.CreateQueueInput{QueueName: aws.String(name), Attributes: attrs})
	if err != nil {
		t.Fatalf("create queue %s: %v", name, err)
	}
	t.Cleanup(func() {
		client.DeleteQueue(t.Context(), &sqs.DeleteQueueInput{QueueUrl: out.QueueUrl})
	})
	return &fauxqs{endpoint: endpoint, client: client, queueURL: *out.QueueUrl}
}

// receive takes n messages off the queue (deleting each), polling until a
// deadline: fauxqs hands out one in-flight message per FIFO group at a time.
func (q *fauxqs) receive(t *testing.T, n int) []types.Message {
	t.Helper()
	var got []types.Message
	seen := map[string]bool{}
	deadline := time.Now().Add(30 * time.Second)
	for len(got) < n && time.Now().Before(deadline) {
		// A short visibility timeout: when a loaded machine makes the SDK
		// retry a ReceiveMessage whose first answer it lost, the messages
		// that answer made invisible come back within seconds, not 30 s.
		out, err := q.client.ReceiveMessage(t.Context(), &sqs.ReceiveMessageInput{
			QueueUrl:                    aws.String(q.queueURL),
			MaxNumberOfMessages:         10,
			WaitTimeSeconds:             1,
			VisibilityTimeout:           3,
			MessageAttributeNames:       []string{"All"},
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll},
		})
		if err != nil {
			t.Fatalf("receive: %v", err)
		}
		for _, m := range out.Messages {
			if seen[aws.ToString(m.MessageId)] { // came back before its delete
				continue
			}
			seen[aws.ToString(m.MessageId)] = true
			got = append(got, m)
			if _, err := q.client.DeleteMessage(t.Context(), &sqs.DeleteMessageInput{QueueUrl: aws.String(q.queueURL), ReceiptHandle: m.ReceiptHandle}); err != nil {
				t.Fatalf("delete: %v", err)
			}
		}
	}
	if len(got) != n {
		t.Fatalf("received %d messages, want %d", len(got), n)
	}
	return got
}

// requireEmpty fails when the queue still holds a visible message.
func (q *fauxqs) requireEmpty(t *testing.T) {
	t.Helper()
	out, err := q.client.ReceiveMessage(t.Context(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(q.queueURL), MaxNumberOfMessages: 10, WaitTimeSeconds: 1})
	if err != nil {
		t.Fatalf("receive: %v", err)
	}
	if len(out.Messages) != 0 {
		t.Fatalf("queue holds %d more messages, want none: first %q", len(out.Messages), aws.ToString(out.Messages[0].Body))
	}
}

// wire is a reverse proxy in front of fauxqs that records the entry count
// of every SendMessageBatch call.
type wire struct {
	mu      sync.Mutex
	batches []int
	url     string
}

func newWire(t *testing.T, endpoint string) *wire {
	t.Helper()
	target, err := url.Parse(endpoint)
	if err != nil {
		t.Fatal(err)
	}
	w := &wire{}
	proxy := httputil.NewSingleHostReverseProxy(target)
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Amz-Target") == "AmazonSQS.SendMessageBatch" {
			body, _ := io.ReadAll(r.Body)
			r.Body = io.NopCloser(bytes.NewReader(body))
			var in struct{ Entries []json.RawMessage }
			if err := json.Unmarshal(body, &in); err != nil {
				t.Errorf("SendMessageBatch body: %v", err)
			}
			w.mu.Lock()
			w.batches = append(w.batches, len(in.Entries))
			w.mu.Unlock()
		}
		proxy.ServeHTTP(rw, r)
	}))
	t.Cleanup(srv.Close)
	w.url = srv.URL
	return w
}

func (w *wire) seen() []int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.batches)
}

func newSender(t *testing.T, o routes.SenderOptions) *Sender {
	t.Helper()
	if o.Region == "" {
		o.Region = "us-east-1"
	}
	s, err := New(t.Context(), routes.SenderConfig{ID: "test", Type: routes.SenderSQS, Options: o}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func envelopes(n int, topic string, payload func(i int) string) []*message.Envelope {
	envs := make([]*message.Envelope, n)
	for i := range envs {
		envs[i] = &message.Envelope{ID: message.NewID(), Topic: topic, Payload: []byte(payload(i)), ReceivedAt: time.Now()}
	}
	return envs
}

func requireAll(t *testing.T, errs []error, n int) {
	t.Helper()
	if len(errs) != n {
		t.Fatalf("Send returned %d errors for %d envelopes", len(errs), n)
	}
	for i, err := range errs {
		if err != nil {
			t.Fatalf("envelope %d: %v", i, err)
		}
	}
}

func attr(m types.Message, name string) string {
	return aws.ToString(m.MessageAttributes[name].StringValue)
}

func TestSender_StandardQueueBatchesOfTen(t *testing.T) {
	q := newQueue(t, false)
	w := newWire(t, q.endpoint)
	s := newSender(t, routes.SenderOptions{QueueURL: q.queueURL, Endpoint: w.url, Attributes: map[string]string{"line": "{topic.1}", "kind": "{payload.kind}"}})
	if s.BatchSize() != 10 {
		t.Fatalf("BatchSize() = %d, want the default 10", s.BatchSize())
	}
	envs := envelopes(25, "factory/line-7/telemetry", func(i int) string { return fmt.Sprintf(`{"kind":"temp","n":%d}`, i) })
	for _, e := range envs {
		e.Headers = map[string]string{"site": "north"}
	}
	requireAll(t, s.Send(t.Context(), envs), 25)
	if got := w.seen(); !slices.Equal(got, []int{10, 10, 5}) {
		t.Fatalf("SendMessageBatch entry counts on the wire = %v, want [10 10 5]", got)
	}
	byID := map[string]*message.Envelope{}
	for _, e := range envs {
		byID[e.ID] = e
	}
	for _, m := range q.receive(t, 25) {
		e := byID[attr(m, IDAttribute)]
		if e == nil {
			t.Fatalf("message %s has no known %s attribute: %v", aws.ToString(m.MessageId), IDAttribute, m.MessageAttributes)
		}
		if aws.ToString(m.Body) != string(e.Payload) || attr(m, "line") != "line-7" || attr(m, "kind") != "temp" || attr(m, "site") != "north" {
			t.Errorf("message %s: body %q attributes %v", e.ID, aws.ToString(m.Body), m.MessageAttributes)
		}
		delete(byID, e.ID)
	}
}

func TestSender_BatchSizeOneSendsSingly(t *testing.T) {
	q := newQueue(t, false)
	w := newWire(t, q.endpoint)
	s := newSender(t, routes.SenderOptions{QueueURL: q.queueURL, Endpoint: w.url, BatchSize: 1})
	requireAll(t, s.Send(t.Context(), envelopes(3, "a/b", func(i int) string { return "m" })), 3)
	if got := w.seen(); !slices.Equal(got, []int{1, 1, 1}) {
		t.Fatalf("entry counts on the wire = %v, want [1 1 1]", got)
	}
	q.receive(t, 3)
}

func TestSender_SplitsBatchesAtTheByteLimit(t *testing.T) {
	q := newQueue(t, false)
	w := newWire(t, q.endpoint)
	s := newSender(t, routes.SenderOptions{QueueURL: q.queueURL, Endpoint: w.url})
	big := strings.Repeat("x", 100<<10)
	requireAll(t, s.Send(t.Context(), envelopes(5, "a/b", func(i int) string { return big })), 5)
	if got := w.seen(); !slices.Equal(got, []int{2, 2, 1}) {
		t.Fatalf("entry counts on the wire = %v, want [2 2 1] (100 KiB messages, 256 KiB per batch)", got)
	}
	q.receive(t, 5)
}

func TestSender_FIFOGroupAndDeduplicationIDs(t *testing.T) {
	q := newQueue(t, true)
	s := newSender(t, routes.SenderOptions{QueueURL: q.queueURL, Endpoint: q.endpoint, MessageGroupID: "{topic.1}"})
	if !s.fifo {
		t.Fatal("a .fifo queue URL must make a FIFO sender")
	}
	var envs []*message.Envelope
	for i := range 8 {
		line := []string{"line-1", "line-2"}[i%2]
		envs = append(envs, &message.Envelope{ID: message.NewID(), Topic: "factory/" + line + "/t", Payload: fmt.Appendf(nil, "%s-%d", line, i/2)})
	}
	long := &message.Envelope{ID: strings.Repeat("k", 200), Topic: "factory/line-1/t", Payload: []byte("line-1-4")}
	envs = append(envs, long)
	requireAll(t, s.Send(t.Context(), envs), 9)
	// The same envelope again is deduplicated by SQS.
	requireAll(t, s.Send(t.Context(), envs[:1]), 1)

	got := q.receive(t, 9)
	q.requireEmpty(t) // the resent envelope was deduplicated
	bodies := map[string][]string{}
	for _, m := range got {
		group := m.Attributes[string(types.MessageSystemAttributeNameMessageGroupId)]
		dedup := m.Attributes[string(types.MessageSystemAttributeNameMessageDeduplicationId)]
		id := attr(m, IDAttribute)
		if dedup != DeduplicationID(id) {
			t.Errorf("message %s: MessageDeduplicationId %q, want %q", id, dedup, DeduplicationID(id))
		}
		if !strings.HasPrefix(aws.ToString(m.Body), group+"-") {
			t.Errorf("message %q in group %q", aws.ToString(m.Body), group)
		}
		bodies[group] = append(bodies[group], aws.ToString(m.Body))
	}
	if want := DeduplicationID(long.ID); len(want) != 64 || want == long.ID {
		t.Errorf("a 200-character ID must be hashed, got %q", want)
	}
	for group, want := range map[string][]string{
		"line-1": {"line-1-0", "line-1-1", "line-1-2", "line-1-3", "line-1-4"},
		"line-2": {"line-2-0", "line-2-1", "line-2-2", "line-2-3"},
	} {
		if !slices.Equal(bodies[group], want) {
			t.Errorf("group %s received %v, want %v in order", group, bodies[group], want)
		}
	}
}

func TestSender_PartialBatchFailure(t *testing.T) {
	q := newQueue(t, false)
	w := newWire(t, q.endpoint)
	s := newSender(t, routes.SenderOptions{QueueURL: q.queueURL, Endpoint: w.url, Attributes: map[string]string{"device": "{payload.device}"}})
	envs := envelopes(6, "a/b", func(i int) string { return fmt.Sprintf(`{"device":"d%d"}`, i) })
	envs[1].Payload = []byte(`{"device":"` + strings.Repeat("x", MaxMessageBytes) + `"}`) // too large
	envs[3].Payload = []byte(`{"other":1}`)                                               // the template cannot fill {payload.device}
	envs[4].Payload = []byte{0xff, 0xfe}                                                  // not text
	errs := s.Send(t.Context(), envs)
	for i, want := range []senders.Class{senders.OK, senders.Fatal, senders.OK, senders.Fatal, senders.Fatal, senders.OK} {
		if class, _ := senders.Classify(errs[i]); class != want {
			t.Errorf("envelope %d: class %v (%v), want %v", i, class, errs[i], want)
		}
	}
	var me *MessageError
	if !errors.As(errs[1], &me) || !strings.Contains(me.Reason, "SQS allows at most 262144") {
		t.Errorf("oversized: %v", errs[1])
	}
	var fe *message.FieldError
	if !errors.As(errs[3], &fe) || fe.Placeholder != "payload.device" || !errors.As(errs[3], &me) {
		t.Errorf("unrenderable: %v", errs[3])
	}
	if got := w.seen(); !slices.Equal(got, []int{3}) {
		t.Errorf("entry counts on the wire = %v, want [3]", got)
	}
	q.receive(t, 3)
}

// TestSender_NonexistentQueueIsTheTargetsFailure: a queue that does not
// exist (yet, or any more) is the target's failure: retried, never a dead
// letter for the message (DESIGN.md §11.3).
func TestSender_NonexistentQueueIsTheTargetsFailure(t *testing.T) {
	q := newQueue(t, false)
	s := newSender(t, routes.SenderOptions{QueueURL: strings.TrimSuffix(q.queueURL, "/") + "-missing", Endpoint: q.endpoint})
	errs := s.Send(t.Context(), envelopes(2, "a/b", func(int) string { return "x" }))
	for _, err := range errs {
		var qdne *types.QueueDoesNotExist
		if class, _ := senders.Classify(err); class != senders.Transient || !errors.As(err, &qdne) {
			t.Fatalf("class %v, err %v: want a transient *types.QueueDoesNotExist", class, err)
		}
	}
}

func TestSender_ConnectionRefusedIsTransient(t *testing.T) {
	testservices.SQSEndpoint(t) // test credentials
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	s := newSender(t, routes.SenderOptions{QueueURL: "http://" + addr + "/000000000000/q", Endpoint: "http://" + addr})
	err = s.Send(t.Context(), envelopes(1, "a/b", func(int) string { return "x" }))[0]
	var oe *net.OpError
	if class, _ := senders.Classify(err); class != senders.Transient || !errors.As(err, &oe) {
		t.Fatalf("class %v, err %v: want a transient dial error", class, err)
	}
}
