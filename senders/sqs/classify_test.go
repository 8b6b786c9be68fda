package sqs

import (
	"context"
	"crypto/md5"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	smithy "github.com/aws/smithy-go"

	"github.com/gobridge/gobridge/routes"
	"github.com/gobridge/gobridge/senders"
)

// fakeSQS is an httptest server speaking the SQS JSON protocol
// (awsJson1_0) that answers every call with one canned response, so that
// the SDK's own error decoding is what the classification sees.
func fakeSQS(t *testing.T, status int, headers map[string]string, body string) *Sender {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		for k, v := range headers {
			w.Header().Set(k, v)
		}
		w.WriteHeader(status)
		io.WriteString(w, body)
	}))
	t.Cleanup(srv.Close)
	t.Setenv("AWS_ACCESS_KEY_ID", "test")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "test")
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	return newSender(t, routes.SenderOptions{QueueURL: srv.URL + "/000000000000/q", Endpoint: srv.URL})
}

func TestSender_CallErrorClasses(t *testing.T) {
	cases := []struct {
		name    string
		status  int
		headers map[string]string
		body    string
		want    senders.Class
		as      func(error) bool
	}{
		{name: "RequestThrottled", status: 400, headers: map[string]string{"X-Amzn-Query-Error": "RequestThrottled;Sender"},
			body: `{"__type":"com.amazonaws.sqs#RequestThrottled","message":"slow down"}`, want: senders.Saturated,
			as: func(err error) bool { _, ok := errors.AsType[*types.RequestThrottled](err); return ok }},
		{name: "KmsThrottled", status: 400, body: `{"__type":"com.amazonaws.sqs#KmsThrottled","message":"kms"}`, want: senders.Saturated,
			as: func(err error) bool { _, ok := errors.AsType[*types.KmsThrottled](err); return ok }},
		{name: "ThrottlingException", status: 400, body: `{"__type":"ThrottlingException","message":"rate"}`, want: senders.Saturated},
		{name: "unmodeled 429", status: 429, body: `{"__type":"SomethingElse"}`, want: senders.Saturated},
		{name: "InternalError 500", status: 500, body: `{"__type":"InternalError","message":"oops"}`, want: senders.Transient},
		{name: "ServiceUnavailable 503", status: 503, body: `{"__type":"ServiceUnavailable"}`, want: senders.Transient},
		{name: "expired credentials", status: 400, body: `{"__type":"ExpiredToken","message":"renew"}`, want: senders.Transient},
		{name: "not JSON 502", status: 502, body: `<html>bad gateway</html>`, want: senders.Transient},
		// The target's failures (DESIGN.md §11.3): retried, never dead-lettered.
		{name: "AccessDenied", status: 403, body: `{"__type":"AccessDeniedException","message":"no"}`, want: senders.Transient},
		{name: "InvalidClientTokenId", status: 403, body: `{"__type":"InvalidClientTokenId","message":"who"}`, want: senders.Transient},
		{name: "KmsAccessDenied", status: 400, body: `{"__type":"com.amazonaws.sqs#KmsAccessDenied","message":"kms"}`, want: senders.Transient},
		// The message's failures: settled at once.
		{name: "InvalidMessageContents", status: 400, body: `{"__type":"com.amazonaws.sqs#InvalidMessageContents","message":"bad char"}`, want: senders.Fatal,
			as: func(err error) bool { _, ok := errors.AsType[*types.InvalidMessageContents](err); return ok }},
		// AWS names some errors by their query code (x-amzn-query-error),
		// which the SDK reports as the error code.
		{name: "BatchRequestTooLong as AWS answers it", status: 400, headers: map[string]string{"X-Amzn-Query-Error": "AWS.SimpleQueueService.BatchRequestTooLong;Sender"},
			body: `{"__type":"com.amazonaws.sqs#BatchRequestTooLong","message":"Batch requests cannot be longer than 262144 bytes"}`, want: senders.Fatal,
			as: func(err error) bool { _, ok := errors.AsType[*types.BatchRequestTooLong](err); return ok }},
		{name: "QueueDoesNotExist", status: 400, headers: map[string]string{"X-Amzn-Query-Error": "AWS.SimpleQueueService.NonExistentQueue;Sender"},
			body: `{"__type":"com.amazonaws.sqs#QueueDoesNotExist","message":"gone"}`, want: senders.Transient,
			as: func(err error) bool { _, ok := errors.AsType[*types.QueueDoesNotExist](err); return ok }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := fakeSQS(t, c.status, c.headers, c.body)
			errs := s.Send(t.Context(), envelopes(3, "a/b", func(int) string { return "x" }))
			for _, err := range errs {
				if class, _ := senders.Classify(err); class != c.want {
					t.Fatalf("class %v, want %v: %v", class, c.want, err)
				}
			}
			if c.as != nil && !c.as(errs[0]) {
				t.Fatalf("error %v does not match the SDK's typed error", errs[0])
			}
		})
	}
}

func TestSender_PerEntryResults(t *testing.T) {
	resp, _ := json.Marshal(map[string]any{
		"Successful": []map[string]any{{"Id": "0", "MessageId": "m0", "MD5OfMessageBody": "9dd4e461268c8034f5c8564e155c67a6"}},
		"Failed": []map[string]any{
			{"Id": "1", "Code": "RequestThrottled", "Message": "slow", "SenderFault": true},
			{"Id": "2", "Code": "InvalidParameterValue", "Message": "bad", "SenderFault": true},
			{"Id": "3", "Code": "InternalError", "Message": "oops", "SenderFault": false},
		},
	})
	s := fakeSQS(t, 200, nil, string(resp))
	errs := s.Send(t.Context(), envelopes(5, "a/b", func(int) string { return "x" }))
	want := []senders.Class{senders.OK, senders.Saturated, senders.Fatal, senders.Transient, senders.Transient}
	for i, err := range errs {
		if class, _ := senders.Classify(err); class != want[i] {
			t.Errorf("entry %d: class %v, want %v: %v", i, class, want[i], err)
		}
	}
	var ee *EntryError
	if !errors.As(errs[2], &ee) || ee.Code != "InvalidParameterValue" || !ee.SenderFault {
		t.Errorf("entry 2: %v", errs[2])
	}
	if !errors.Is(errs[4], errNoResult) {
		t.Errorf("entry 4 (absent from the response): %v", errs[4])
	}
}

func TestSender_DeadlineIsTransient(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	t.Cleanup(srv.Close)
	defer close(release)
	t.Setenv("AWS_ACCESS_KEY_ID", "test")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "test")
	s := newSender(t, routes.SenderOptions{QueueURL: srv.URL + "/0/q", Endpoint: srv.URL})
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	err := s.Send(ctx, envelopes(1, "a/b", func(int) string { return "x" }))[0]
	if class, _ := senders.Classify(err); class != senders.Transient || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("class %v, err %v: want transient deadline", class, err)
	}
}

// TestClassifyCall_NeverReadsText shows that the same text under a
// different code classifies differently: the code decides, not the message.
func TestClassifyCall_NeverReadsText(t *testing.T) {
	throttle := &smithy.GenericAPIError{Code: "ThrottlingException", Message: "queue does not exist"}
	gone := &smithy.GenericAPIError{Code: "AccessDenied", Message: "throttling"}
	if class, _ := senders.Classify(classifyCall(throttle)); class != senders.Saturated {
		t.Errorf("throttle: %v", class)
	}
	if class, _ := senders.Classify(classifyCall(gone)); class != senders.Transient {
		t.Errorf("access denied: %v", class)
	}
	bad := &smithy.GenericAPIError{Code: "InvalidMessageContents", Message: "throttling"}
	if class, _ := senders.Classify(classifyCall(bad)); class != senders.Fatal {
		t.Errorf("invalid message: %v", class)
	}
}

// TestSender_ACallRefusedForOneMessageFailsOnlyThatMessage: SQS refuses a
// whole SendMessageBatch call with a message error code (here for a body
// containing "poison"); the sender splits the call until only that
// message fails permanently, and the others are accepted.
func TestSender_ACallRefusedForOneMessageFailsOnlyThatMessage(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		var in struct {
			Entries []struct{ Id, MessageBody string }
		}
		if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
			t.Errorf("decode request: %v", err)
		}
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		var ok []map[string]any
		for _, e := range in.Entries {
			if strings.Contains(e.MessageBody, "poison") {
				w.WriteHeader(400)
				io.WriteString(w, `{"__type":"com.amazonaws.sqs#InvalidMessageContents","message":"bad"}`)
				return
			}
			ok = append(ok, map[string]any{"Id": e.Id, "MessageId": "m" + e.Id, "MD5OfMessageBody": fmt.Sprintf("%x", md5.Sum([]byte(e.MessageBody)))})
		}
		json.NewEncoder(w).Encode(map[string]any{"Successful": ok, "Failed": []any{}})
	}))
	t.Cleanup(srv.Close)
	t.Setenv("AWS_ACCESS_KEY_ID", "test")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "test")
	s := newSender(t, routes.SenderOptions{QueueURL: srv.URL + "/000000000000/q", Endpoint: srv.URL})
	envs := envelopes(10, "a/b", func(i int) string { return map[bool]string{true: "poison", false: "fine"}[i == 6] })
	errs := s.Send(t.Context(), envs)
	for i, err := range errs {
		want := map[bool]senders.Class{true: senders.Fatal, false: senders.OK}[i == 6]
		if class, _ := senders.Classify(err); class != want {
			t.Errorf("entry %d: class %v, want %v: %v", i, class, want, err)
		}
	}
	if n := calls.Load(); n > 9 { // 1 + 2 + 2 + 2 + 2 halvings at the most
		t.Errorf("%d calls for one refused message in a batch of 10", n)
	}
}

// TestSender_ABatchOverTheServersLimitIsSplit: a server that takes less per
// call than gobridge sends refuses the call as AWS does (BatchRequestTooLong,
// named by its query code); the sender splits it and every message goes
// through, instead of retrying the whole batch as the target's failure.
func TestSender_ABatchOverTheServersLimitIsSplit(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var in struct {
			Entries []struct{ Id, MessageBody string }
		}
		if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
			t.Errorf("decode request: %v", err)
		}
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		var ok []map[string]any
		total := 0
		for _, e := range in.Entries {
			total += len(e.MessageBody)
			ok = append(ok, map[string]any{"Id": e.Id, "MessageId": "m" + e.Id, "MD5OfMessageBody": fmt.Sprintf("%x", md5.Sum([]byte(e.MessageBody)))})
		}
		if total > 150 {
			w.Header().Set("X-Amzn-Query-Error", "AWS.SimpleQueueService.BatchRequestTooLong;Sender")
			w.WriteHeader(400)
			io.WriteString(w, `{"__type":"com.amazonaws.sqs#BatchRequestTooLong","message":"too long"}`)
			return
		}
		json.NewEncoder(w).Encode(map[string]any{"Successful": ok, "Failed": []any{}})
	}))
	t.Cleanup(srv.Close)
	t.Setenv("AWS_ACCESS_KEY_ID", "test")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "test")
	s := newSender(t, routes.SenderOptions{QueueURL: srv.URL + "/000000000000/q", Endpoint: srv.URL})
	for i, err := range s.Send(t.Context(), envelopes(4, "a/b", func(int) string { return strings.Repeat("x", 60) })) {
		if err != nil {
			t.Errorf("entry %d: %v", i, err)
		}
	}
}
