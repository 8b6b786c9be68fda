package sqs

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/gobridge/gobridge/internal/testservices"
	"github.com/gobridge/gobridge/message"
	"github.com/gobridge/gobridge/routes"
	"github.com/gobridge/gobridge/senders"
)

// When SQS refuses one entry of a FIFO group and accepts the others, a
// later message of that group must not reach the queue ahead of the
// refused one, which is retried: within the call (at most one entry per
// group per SendMessageBatch) and in the calls after it (the group's later
// entries are held, not sent). The server answers as SQS does, failing
// every entry whose body is "g-1" with InternalError.
func TestSender_FIFOHoldsAGroupBehindAFailedEntry(t *testing.T) {
	testservices.SQSEndpoint(t) // test credentials
	var mu sync.Mutex
	var accepted []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var in struct {
			Entries []struct{ Id, MessageBody, MessageGroupId string }
		}
		if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
			t.Errorf("SendMessageBatch body: %v", err)
		}
		type ok struct{ Id, MessageId string }
		type failed struct {
			Id, Code, Message string
			SenderFault       bool
		}
		out := struct {
			Successful []ok
			Failed     []failed
		}{Successful: []ok{}, Failed: []failed{}}
		mu.Lock()
		for _, e := range in.Entries {
			if e.MessageBody == "g-1" {
				out.Failed = append(out.Failed, failed{Id: e.Id, Code: "InternalError", Message: "try again"})
				continue
			}
			accepted = append(accepted, e.MessageBody)
			out.Successful = append(out.Successful, ok{Id: e.Id, MessageId: fmt.Sprint(len(accepted))})
		}
		mu.Unlock()
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		json.NewEncoder(w).Encode(out)
	}))
	t.Cleanup(srv.Close)
	s := newSender(t, routes.SenderOptions{QueueURL: srv.URL + "/000000000000/q.fifo", Endpoint: srv.URL, MessageGroupID: "{topic}"})
	var envs []*message.Envelope
	for _, b := range []string{"g-1", "g-2", "h-1", "g-3", "h-2"} {
		envs = append(envs, &message.Envelope{ID: message.NewID(), Topic: b[:1], Payload: []byte(b)})
	}
	errs := s.Send(t.Context(), envs)
	for i, want := range []senders.Class{senders.Transient, senders.Saturated, senders.OK, senders.Saturated, senders.OK} {
		if class, _ := senders.Classify(errs[i]); class != want {
			t.Errorf("envelope %s: class %v (%v), want %v", envs[i].Payload, class, errs[i], want)
		}
	}
	if want := []string{"h-1", "h-2"}; !slices.Equal(accepted, want) {
		t.Errorf("the queue accepted %v, want %v: group g's later messages went ahead of g-1", accepted, want)
	}
}

// TestSender_AHeldEntryIsNoFailureOfTheTarget: one failed entry of a FIFO
// group holds the group's later entries unsent; the sender's health counts
// the failure, not the held entries, so one failed entry does not mark the
// sender down (3 failures on distinct messages would).
func TestSender_AHeldEntryIsNoFailureOfTheTarget(t *testing.T) {
	testservices.SQSEndpoint(t) // test credentials
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var in struct {
			Entries []struct{ Id, MessageBody string }
		}
		json.NewDecoder(r.Body).Decode(&in)
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		failed := []map[string]any{}
		for _, e := range in.Entries {
			failed = append(failed, map[string]any{"Id": e.Id, "Code": "InternalError", "Message": "try again", "SenderFault": false})
		}
		json.NewEncoder(w).Encode(map[string]any{"Successful": []any{}, "Failed": failed})
	}))
	t.Cleanup(srv.Close)
	s := newSender(t, routes.SenderOptions{QueueURL: srv.URL + "/000000000000/q.fifo", Endpoint: srv.URL, MessageGroupID: "{topic}"})
	envs := envelopes(3, "g", func(i int) string { return fmt.Sprint("g-", i) })
	h := senders.NewHealth()
	for i, err := range s.Send(t.Context(), envs) {
		if held := errors.Is(err, senders.ErrHeld); held != (i > 0) {
			t.Errorf("envelope %d: %v, held %v", i, err, held)
		}
		h.Record(envs[i].ID, err, time.Now(), func(int) time.Duration { return time.Second })
	}
	if !h.Up() {
		t.Errorf("one failed entry and two held behind it marked the sender down: %s", h.LastError())
	}
}
