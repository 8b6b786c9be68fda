package stdout

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gobridge/gobridge/message"
	"github.com/gobridge/gobridge/senders"
)

func envelope(payload []byte) *message.Envelope {
	return &message.Envelope{
		ID:         message.NewID(),
		Topic:      "factory/line-7/telemetry",
		Payload:    payload,
		Headers:    map[string]string{"site": "line-7"},
		QoS:        1,
		ReceivedAt: time.Date(2026, 11, 30, 12, 0, 0, 5, time.UTC),
	}
}

func decodeLines(t *testing.T, b []byte) []map[string]any {
	t.Helper()
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("line %q is not JSON: %v", sc.Text(), err)
		}
		out = append(out, m)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestSender_WritesOneJSONLinePerMessage(t *testing.T) {
	var buf bytes.Buffer
	s := New(&buf)
	text := envelope([]byte(`{"temp": 21.5}`))
	binary := envelope([]byte{0xff, 0x00, 0xfe})
	errs := s.Send(t.Context(), []*message.Envelope{text, binary})
	if len(errs) != 2 || errs[0] != nil || errs[1] != nil {
		t.Fatalf("Send errors = %v", errs)
	}
	lines := decodeLines(t, buf.Bytes())
	if len(lines) != 2 {
		t.Fatalf("got %d lines, want 2: %q", len(lines), buf.String())
	}
	if got := lines[0]; got["id"] != text.ID || got["topic"] != text.Topic || got["payload"] != `{"temp": 21.5}` ||
		got["received_at"] != "2026-11-30T12:00:00.000000005Z" || got["headers"].(map[string]any)["site"] != "line-7" {
		t.Errorf("text line = %v", got)
	}
	if _, ok := lines[0]["payload_encoding"]; ok {
		t.Errorf("text line has payload_encoding: %v", lines[0])
	}
	if got := lines[1]; got["payload_encoding"] != "base64" || got["payload"] != base64.StdEncoding.EncodeToString(binary.Payload) {
		t.Errorf("binary line = %v", got)
	}
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

func TestSender_WriteErrorIsTransient(t *testing.T) {
	errs := New(failingWriter{}).Send(t.Context(), []*message.Envelope{envelope([]byte("x"))})
	if class, _ := senders.Classify(errs[0]); class != senders.Transient {
		t.Fatalf("class = %v (%v), want transient", class, errs[0])
	}
}

func TestSender_ConcurrentLinesDoNotInterleave(t *testing.T) {
	var buf bytes.Buffer
	s := New(&buf)
	big := []byte(strings.Repeat("x", 64<<10))
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 10 {
				if errs := s.Send(t.Context(), []*message.Envelope{envelope(big)}); errs[0] != nil {
					t.Error(errs[0])
				}
			}
		})
	}
	wg.Wait()
	if lines := decodeLines(t, buf.Bytes()); len(lines) != 80 {
		t.Fatalf("got %d lines, want 80", len(lines))
	}
}

func TestSender_CancelledContext(t *testing.T) {
	var buf bytes.Buffer
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	errs := New(&buf).Send(ctx, []*message.Envelope{envelope([]byte("x"))})
	if !errors.Is(errs[0], context.Canceled) || buf.Len() != 0 {
		t.Fatalf("errs = %v, wrote %q", errs, buf.String())
	}
}

// A write blocked on a pipe nobody reads (a console whose reader hangs)
// ends Send with its context, so that it holds no shutdown. The abandoned
// line is still written whole, before the next one, once the pipe drains.
func TestSender_BlockedPipeEndsWithTheContext(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close(); _ = w.Close() })
	s := New(w)
	ctx, cancel := context.WithCancel(t.Context())
	sent := make(chan []error, 1)
	go func() { // a line far beyond the pipe's buffer (64 KiB on Linux)
		sent <- s.Send(ctx, []*message.Envelope{envelope([]byte(strings.Repeat("x", 512<<10)))})
	}()
	if _, err := r.Read(make([]byte, 1)); err != nil { // the write began: "{"
		t.Fatal(err)
	}
	cancel()
	select {
	case errs := <-sent:
		if !errors.Is(errs[0], context.Canceled) {
			t.Fatalf("Send = %v; want context.Canceled", errs[0])
		}
	case <-time.After(time.Minute): // liveness bound, not a speed check
		t.Fatal("Send still blocked on the pipe a minute after its context ended")
	}
	got := make(chan []byte, 1)
	go func() { b, _ := io.ReadAll(r); got <- b }()
	if errs := s.Send(t.Context(), []*message.Envelope{envelope([]byte("next"))}); errs[0] != nil {
		t.Fatal(errs[0])
	}
	_ = w.Close()
	lines := decodeLines(t, append([]byte("{"), <-got...))
	if len(lines) != 2 || len(lines[0]["payload"].(string)) != 512<<10 || lines[1]["payload"] != "next" {
		t.Fatalf("the pipe got %d lines; want the abandoned one whole, then the next", len(lines))
	}
}
