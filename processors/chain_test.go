package processors

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strconv"
	"sync"
	"testing"

	"github.com/gobridge/gobridge/message"
	"github.com/gobridge/gobridge/routes"
	"github.com/gobridge/gobridge/senders"
)

const telemetry = `{"msg_id":"m-0001","temp":81.5,"unit":"C","ok":true,"line":7,` +
	`"sensors":[{"id":"s-1","v":12.25},{"id":"s-2","v":13.5}],"serial":12345678901234567890,` +
	`"meta":{"fw":"1.4.2","site":"berlin","shift":"night"},"note":"steady state reading"}`

func envelope(payload string) *message.Envelope {
	return &message.Envelope{
		ID:      "orig-id",
		Topic:   "factory/line-7/telemetry",
		Payload: []byte(payload),
		QoS:     1,
	}
}

func compile(t *testing.T, ordering string, ps ...routes.ProcessorConfig) *Chain {
	t.Helper()
	c, err := Compile(routes.RouteConfig{ID: "r", Processors: ps, OrderingKey: ordering}, 0)
	if err != nil {
		t.Fatalf("Compile: %v", err)
	}
	return c
}

// permanent asserts err is a permanent processing failure and returns its
// *ProcessError.
func permanent(t *testing.T, err error) *ProcessError {
	t.Helper()
	if _, ok := errors.AsType[*senders.PermanentError](err); !ok {
		t.Fatalf("error %v is not a *senders.PermanentError", err)
	}
	pe, ok := errors.AsType[*ProcessError](err)
	if !ok {
		t.Fatalf("error %v does not wrap a *ProcessError", err)
	}
	return pe
}

func TestChain_Process(t *testing.T) {
	t.Parallel()
	c := compile(t, "{header.site}",
		routes.ProcessorConfig{Type: TypeFilter, Expr: "payload.temp > 80"},
		routes.ProcessorConfig{Type: TypeTransform, Expr: "{'temp_c': payload.temp, 'line': topic_segments[1], 'id': payload.msg_id}"},
		routes.ProcessorConfig{Type: TypeSetHeaders, Headers: map[string]string{"site": "{topic.1}", "msg": "{payload.id}"}},
		routes.ProcessorConfig{Type: TypeIdempotencyKey, From: "{payload.id}"},
		routes.ProcessorConfig{Type: TypeCoalesce, Key: "{topic}"},
	)
	if len(c.steps) != 5 || c.orderingKey.String() != "{header.site}" {
		t.Fatalf("%d steps, ordering key %v", len(c.steps), c.orderingKey)
	}

	e := envelope(telemetry)
	res, err := c.Process(e)
	if err != nil {
		t.Fatalf("Process: %v", err)
	}
	if res.Drop || res.CoalesceKey != "factory/line-7/telemetry" {
		t.Errorf("Result = %+v", res)
	}
	if want := `{"id":"m-0001","line":"line-7","temp_c":81.5}`; string(e.Payload) != want {
		t.Errorf("Payload = %s, want %s", e.Payload, want)
	}
	if e.Headers["site"] != "line-7" || e.Headers["msg"] != "m-0001" {
		t.Errorf("Headers = %v", e.Headers)
	}
	if e.ID != "m-0001" || e.Key != "line-7" {
		t.Errorf("ID = %q, Key = %q", e.ID, e.Key)
	}

	cold := envelope(`{"msg_id":"m-2","temp":20}`)
	res, err = c.Process(cold)
	if err != nil || !res.Drop {
		t.Fatalf("cold message: Result = %+v, err = %v; want dropped", res, err)
	}
	if cold.ID != "orig-id" || cold.Headers != nil {
		t.Errorf("dropped message was changed by later processors: %+v", cold)
	}
}

func TestChain_EmptyChainLeavesEnvelope(t *testing.T) {
	t.Parallel()
	c := compile(t, "")
	e := envelope("anything")
	res, err := c.Process(e)
	if err != nil || res != (Result{}) || e.Key != "" || e.ID != "orig-id" {
		t.Fatalf("Process = %+v, %v; envelope %+v", res, err, e)
	}
}

func TestChain_OrderingKeyMissingFieldIsPermanent(t *testing.T) {
	t.Parallel()
	c := compile(t, "{payload.device}")
	_, err := c.Process(envelope(telemetry))
	pe := permanent(t, err)
	if pe.Index != -1 {
		t.Errorf("Index = %d, want -1", pe.Index)
	}
	if fe, ok := errors.AsType[*message.FieldError](err); !ok || fe.Placeholder != "payload.device" {
		t.Errorf("error %v: want a *message.FieldError for payload.device", err)
	}
}

// An ordering key that renders "" would silently drop the route's per-key
// FIFO promise for that message (e.Key "" means unordered): it fails, like
// an empty idempotency or coalesce key.
func TestChain_OrderingKeyEmptyIsPermanent(t *testing.T) {
	t.Parallel()
	c := compile(t, "{payload.line}")
	e := envelope(`{"line":""}`)
	_, err := c.Process(e)
	if pe := permanent(t, err); pe.Index != -1 {
		t.Errorf("Index = %d, want -1", pe.Index)
	}
	if e.Key != "" || e.ID != "orig-id" {
		t.Errorf("envelope changed: Key %q, ID %q", e.Key, e.ID)
	}
}

func TestChain_TransformInvalidatesDecodedPayload(t *testing.T) {
	t.Parallel()
	c := compile(t, "",
		routes.ProcessorConfig{Type: TypeSetHeaders, Headers: map[string]string{"before": "{payload.msg_id}"}},
		routes.ProcessorConfig{Type: TypeTransform, Expr: "{'msg_id': 'new-' + payload.msg_id}"},
		routes.ProcessorConfig{Type: TypeFilter, Expr: "payload.msg_id == 'new-m-0001' && raw contains 'new-'"},
		routes.ProcessorConfig{Type: TypeSetHeaders, Headers: map[string]string{"after": "{payload.msg_id}"}},
	)
	e := envelope(telemetry)
	res, err := c.Process(e)
	if err != nil || res.Drop {
		t.Fatalf("Process = %+v, %v", res, err)
	}
	if e.Headers["before"] != "m-0001" || e.Headers["after"] != "new-m-0001" {
		t.Errorf("Headers = %v", e.Headers)
	}
}

func TestChain_ConcurrentProcess(t *testing.T) {
	t.Parallel()
	c := compile(t, "{topic.1}",
		routes.ProcessorConfig{Type: TypeFilter, Expr: "payload.n % 2 == 0"},
		routes.ProcessorConfig{Type: TypeSetHeaders, Headers: map[string]string{"n": "{payload.n}"}},
		routes.ProcessorConfig{Type: TypeIdempotencyKey, Hash: true},
	)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for n := range 200 {
				v := g*1000 + n
				e := envelope(`{"n":` + strconv.Itoa(v) + `}`)
				res, err := c.Process(e)
				if err != nil {
					t.Errorf("Process: %v", err)
					return
				}
				if res.Drop != (v%2 != 0) {
					t.Errorf("n=%d Drop = %v", v, res.Drop)
				}
				if !res.Drop && e.Headers["n"] != strconv.Itoa(v) {
					t.Errorf("n=%d header = %q (state leaked between messages?)", v, e.Headers["n"])
				}
			}
		})
	}
	wg.Wait()
}

func TestIdempotencyKey_Hash(t *testing.T) {
	t.Parallel()
	c := compile(t, "", routes.ProcessorConfig{Type: TypeIdempotencyKey, Hash: true})
	e := envelope(telemetry)
	if _, err := c.Process(e); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte("factory/line-7/telemetry\x00" + telemetry))
	if want := hex.EncodeToString(sum[:]); e.ID != want {
		t.Errorf("ID = %s, want %s", e.ID, want)
	}
	again := envelope(telemetry)
	again.ID = "different"
	_, _ = c.Process(again)
	if again.ID != e.ID {
		t.Error("the same topic and payload hashed to different IDs")
	}
	other := envelope(telemetry)
	other.Topic = "factory/line-8/telemetry"
	_, _ = c.Process(other)
	if other.ID == e.ID {
		t.Error("a different topic hashed to the same ID")
	}
}

func TestIdempotencyKey_From(t *testing.T) {
	t.Parallel()
	c := compile(t, "", routes.ProcessorConfig{Type: TypeIdempotencyKey, From: "{topic.1}:{payload.serial}"})
	e := envelope(telemetry)
	if _, err := c.Process(e); err != nil {
		t.Fatal(err)
	}
	if e.ID != "line-7:12345678901234567890" {
		t.Errorf("ID = %q", e.ID)
	}

	t.Run("empty value is a permanent failure", func(t *testing.T) {
		c := compile(t, "", routes.ProcessorConfig{Type: TypeIdempotencyKey, From: "{payload.id}"})
		_, err := c.Process(envelope(`{"id": ""}`))
		if pe := permanent(t, err); pe.Index != 0 || pe.Type != TypeIdempotencyKey {
			t.Errorf("ProcessError = %+v", pe)
		}
	})
	t.Run("missing field is a permanent failure", func(t *testing.T) {
		c := compile(t, "", routes.ProcessorConfig{Type: TypeIdempotencyKey, From: "{payload.id}"})
		_, err := c.Process(envelope(`{"other": 1}`))
		permanent(t, err)
		if fe, ok := errors.AsType[*message.FieldError](err); !ok || fe.Placeholder != "payload.id" {
			t.Errorf("error %v: want *message.FieldError for payload.id", err)
		}
	})
}

func TestCoalesce_Key(t *testing.T) {
	t.Parallel()
	c := compile(t, "", routes.ProcessorConfig{Type: TypeCoalesce, Key: "hb/{topic.1}/{payload.meta.site}"})
	res, err := c.Process(envelope(telemetry))
	if err != nil || res.CoalesceKey != "hb/line-7/berlin" {
		t.Fatalf("Process = %+v, %v", res, err)
	}
	_, err = c.Process(envelope("not json"))
	permanent(t, err)
}

func TestSetHeaders_KeepsExistingAndRendersFromOldValues(t *testing.T) {
	t.Parallel()
	c := compile(t, "", routes.ProcessorConfig{Type: TypeSetHeaders, Headers: map[string]string{
		"a": "{header.b}", "b": "new", "empty": "", "lit": "{{x}}",
	}})
	e := envelope(telemetry)
	e.Headers = map[string]string{"b": "old", "keep": "k"}
	if _, err := c.Process(e); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"a": "old", "b": "new", "empty": "", "lit": "{x}", "keep": "k"}
	for k, v := range want {
		if got, ok := e.Headers[k]; !ok || got != v {
			t.Errorf("header %q = %q, want %q", k, got, v)
		}
	}
}

func TestChain_FailureLeavesEnvelopeAsItArrived(t *testing.T) {
	t.Parallel()
	c := compile(t, "",
		routes.ProcessorConfig{Type: TypeTransform, Expr: "{'v': 1}"},
		routes.ProcessorConfig{Type: TypeSetHeaders, Headers: map[string]string{"a": "x", "b": "y"}},
		routes.ProcessorConfig{Type: TypeIdempotencyKey, Hash: true},
		routes.ProcessorConfig{Type: TypeCoalesce, Key: "{payload.missing}"},
	)
	headers := map[string]string{"a": "orig"}
	e := envelope(telemetry)
	e.Headers = headers
	_, err := c.Process(e)
	permanent(t, err)
	if string(e.Payload) != telemetry || e.ID != "orig-id" || e.Key != "" {
		t.Errorf("envelope changed by a failed Process: %+v", e)
	}
	if len(headers) != 1 || headers["a"] != "orig" || len(e.Headers) != 1 || e.Headers["a"] != "orig" {
		t.Errorf("headers changed by a failed Process: original %v, envelope %v", headers, e.Headers)
	}
}
