package processors

import (
	"errors"
	"strings"
	"testing"

	"github.com/gobridge/gobridge/message"
	"github.com/gobridge/gobridge/routes"
	"github.com/gobridge/gobridge/senders"
)

func TestFilter_KeepsAndDrops(t *testing.T) {
	t.Parallel()
	cases := []struct {
		expr, payload string
		drop          bool
	}{
		{"payload.temp > 80", telemetry, false},
		{"payload.temp > 90", telemetry, true},
		{"payload.temp != nil", `{"x":1}`, true},
		{"payload == nil", "not json", false},
		{"payload?.temp != nil", "not json", true},
		{"raw startsWith 'not'", "not json", false},
		{"topic == 'factory/line-7/telemetry' && qos == 1", "", false},
		{"topic_segments[1] == 'line-8'", "", true},
		{"headers.site == 'berlin'", "", false},
		{"'site' in headers", "", false},
		{"string(payload.serial) == '12345678901234567890'", telemetry, false},
		{"payload.line > 1000", telemetry, true},
		{"payload.line == 7 && payload.sensors[1].v > 13", telemetry, false},
		{"len(payload.sensors) == 2 && payload.meta.fw == '1.4.2'", telemetry, false},
	}
	for _, c := range cases {
		ch := compile(t, "", routes.ProcessorConfig{Type: TypeFilter, Expr: c.expr})
		e := envelope(c.payload)
		e.Headers = map[string]string{"site": "berlin"}
		res, err := ch.Process(e)
		if err != nil {
			t.Errorf("%s: %v", c.expr, err)
			continue
		}
		if res.Drop != c.drop {
			t.Errorf("%s on %.20s: Drop = %v, want %v", c.expr, c.payload, res.Drop, c.drop)
		}
	}
}

func TestFilter_RuntimeFailuresArePermanent(t *testing.T) {
	t.Parallel()
	cases := []struct{ expr, payload string }{
		{"payload.unit", telemetry},                // a string, not a bool
		{"payload.missing.deeper == 1", telemetry}, // fetch from nil
		{"payload.temp > 80", "not json"},          // nil > 80
		{"payload.sensors[5].v > 1", telemetry},    // index out of range
		{"payload.unit > 1", telemetry},            // string > int
		{"payload.serial > 1", telemetry},          // beyond int64: json.Number
	}
	for _, c := range cases {
		ch := compile(t, "",
			routes.ProcessorConfig{Type: TypeSetHeaders, Headers: map[string]string{"a": "b"}},
			routes.ProcessorConfig{Type: TypeFilter, Expr: c.expr})
		_, err := ch.Process(envelope(c.payload))
		if err == nil {
			t.Errorf("%s: no error", c.expr)
			continue
		}
		if pe := permanent(t, err); pe.Index != 1 || pe.Type != TypeFilter {
			t.Errorf("%s: ProcessError = %+v", c.expr, pe)
		}
	}
}

func TestTransform_Results(t *testing.T) {
	t.Parallel()
	cases := []struct{ expr, want string }{
		{"{'t': payload.temp, 'serial': payload.serial}", `{"serial":12345678901234567890,"t":81.5}`},
		{"payload.sensors", `[{"id":"s-1","v":12.25},{"id":"s-2","v":13.5}]`},
		{"payload.meta.site", `berlin`},
		{"'<' + upper(payload.unit) + '>'", `<C>`},
		{"payload.line * 2", `14`},
		{"payload.temp / 2", `40.75`},
		{"payload.ok", `true`},
		{"payload.nothing", `null`},
		{"map(payload.sensors, .id)", `["s-1","s-2"]`},
	}
	for _, c := range cases {
		ch := compile(t, "", routes.ProcessorConfig{Type: TypeTransform, Expr: c.expr})
		e := envelope(telemetry)
		if _, err := ch.Process(e); err != nil {
			t.Errorf("%s: %v", c.expr, err)
			continue
		}
		if string(e.Payload) != c.want {
			t.Errorf("%s: payload = %s, want %s", c.expr, e.Payload, c.want)
		}
	}

	t.Run("unencodable result is a permanent failure", func(t *testing.T) {
		ch := compile(t, "", routes.ProcessorConfig{Type: TypeTransform, Expr: "payload.temp / 0"}) // +Inf
		_, err := ch.Process(envelope(telemetry))
		permanent(t, err)
	})
}

func TestCompile_Errors(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		route  routes.RouteConfig
		index  int
		field  string
		offset int
	}{
		{"unknown type", route(routes.ProcessorConfig{Type: "enrich"}), 0, "type", -1},
		{"missing type", route(routes.ProcessorConfig{Expr: "true"}), 0, "type", -1},
		{"filter without expr", route(routes.ProcessorConfig{Type: TypeFilter}), 0, "expr", -1},
		{"transform without expr", route(routes.ProcessorConfig{Type: TypeTransform, Expr: "  "}), 0, "expr", -1},
		{"filter syntax error", route(okFilter, routes.ProcessorConfig{Type: TypeFilter, Expr: "payload.temp >"}), 1, "expr", 13},
		{"filter not bool", route(routes.ProcessorConfig{Type: TypeFilter, Expr: "qos + 1"}), 0, "expr", -1},
		{"unknown variable", route(routes.ProcessorConfig{Type: TypeFilter, Expr: "temp > 80"}), 0, "expr", 0},
		{"idempotency both", route(routes.ProcessorConfig{Type: TypeIdempotencyKey, From: "{id}", Hash: true}), 0, "hash", -1},
		{"idempotency neither", route(routes.ProcessorConfig{Type: TypeIdempotencyKey}), 0, "from", -1},
		{"idempotency bad template", route(routes.ProcessorConfig{Type: TypeIdempotencyKey, From: "x-{payload}"}), 0, "from", 2},
		{"coalesce without key", route(routes.ProcessorConfig{Type: TypeCoalesce}), 0, "key", -1},
		{"coalesce bad template", route(routes.ProcessorConfig{Type: TypeCoalesce, Key: "{topic.x}"}), 0, "key", 0},
		{"set_headers empty", route(routes.ProcessorConfig{Type: TypeSetHeaders}), 0, "headers", -1},
		{"set_headers bad template", route(routes.ProcessorConfig{Type: TypeSetHeaders, Headers: map[string]string{"a": "ok", "site": "{nope}"}}), 0, "headers.site", 0},
		{"ordering key", routes.RouteConfig{OrderingKey: "{topic"}, -1, "ordering_key", 0},
	}
	for _, c := range cases {
		_, err := Compile(c.route, 0)
		ce, ok := errors.AsType[*CompileError](err)
		if !ok {
			t.Errorf("%s: error %v, want *CompileError", c.name, err)
			continue
		}
		if ce.Index != c.index || ce.Field != c.field || ce.Offset != c.offset {
			t.Errorf("%s: CompileError{Index: %d, Field: %q, Offset: %d} (%v), want %d %q %d",
				c.name, ce.Index, ce.Field, ce.Offset, err, c.index, c.field, c.offset)
		}
	}
}

var okFilter = routes.ProcessorConfig{Type: TypeFilter, Expr: "true"}

func route(ps ...routes.ProcessorConfig) routes.RouteConfig {
	return routes.RouteConfig{ID: "r", Processors: ps}
}

func TestCompile_ReportsEveryProblem(t *testing.T) {
	t.Parallel()
	_, err := Compile(routes.RouteConfig{
		Processors: []routes.ProcessorConfig{
			{Type: TypeFilter, Expr: "nope"},
			okFilter,
			{Type: TypeCoalesce},
		},
		OrderingKey: "{bad}",
	}, 0)
	ces, ok := errors.AsType[CompileErrors](err)
	if !ok || len(ces) != 3 {
		t.Fatalf("error %v: want 3 CompileErrors", err)
	}
	want := []string{"processors[0].expr", "processors[2].key", "ordering_key"}
	for i, ce := range ces {
		if ce.Path() != want[i] {
			t.Errorf("problem %d at %s, want %s", i, ce.Path(), want[i])
		}
	}
	var te *message.TemplateError
	if !errors.As(ces[2], &te) || te.Offset != 0 {
		t.Errorf("ordering_key problem %v does not carry the template offset", ces[2])
	}
}

// A transform may not make more than its receiver's max_payload_bytes:
// JSON escapes turn control bytes into six times as many. The message
// fails permanently and is left as it arrived.
func TestTransform_OutputOverMaxPayloadBytesFails(t *testing.T) {
	c, err := Compile(routes.RouteConfig{Processors: []routes.ProcessorConfig{
		{Type: TypeTransform, Expr: "{'a': raw}"},
	}}, 1024)
	if err != nil {
		t.Fatal(err)
	}
	small := &message.Envelope{ID: "1", Payload: []byte("\x01\x02")}
	if _, err := c.Process(small); err != nil || string(small.Payload) != `{"a":"\u0001\u0002"}` {
		t.Fatalf("under the limit: %q, %v", small.Payload, err)
	}
	in := strings.Repeat("\x01", 1000)
	e := &message.Envelope{ID: "2", Payload: []byte(in)}
	_, err = c.Process(e)
	if class, _ := senders.Classify(err); class != senders.Fatal || !strings.Contains(err.Error(), "max_payload_bytes (1024)") {
		t.Fatalf("over the limit: %v, want a permanent max_payload_bytes error", err)
	}
	if string(e.Payload) != in {
		t.Fatal("the message was changed")
	}
}

// On a route whose topic has a fixed number of levels, topic_segments[N]
// beyond them fails every message at run time ("index out of range"), so
// it is a compile error at the index; unless the expression reads
// len(topic_segments), or the topic ends in '#'.
func TestCompile_TopicSegmentsOutOfRange(t *testing.T) {
	t.Parallel()
	fixed := func(expr string) routes.RouteConfig {
		return routes.RouteConfig{ID: "r", Topic: "$share/g/factory/+/data", Processors: []routes.ProcessorConfig{{Type: TypeTransform, Expr: expr}}}
	}
	for expr, offset := range map[string]int{
		"{'line': topic_segments[1], 'cell': topic_segments[3]}":  50,
		"{'line': topic_segments[1], 'cell': topic_segments[-4]}": 50,
	} {
		_, err := Compile(fixed(expr), 0)
		ce, ok := errors.AsType[*CompileError](err)
		if !ok || ce.Field != "expr" || ce.Offset != offset {
			t.Errorf("%s: %v, want a CompileError at expr offset %d", expr, err, offset)
		}
	}
	for _, expr := range []string{"{'a': topic_segments[2], 'b': topic_segments[-3]}", "{'c': len(topic_segments) > 3 ? topic_segments[3] : ''}"} {
		if _, err := Compile(fixed(expr), 0); err != nil {
			t.Errorf("%s: %v", expr, err)
		}
	}
	// Where the levels are not fixed it compiles, and a topic too short
	// for it fails at run time, permanently.
	open := routes.RouteConfig{ID: "r", Topic: "factory/#", Processors: []routes.ProcessorConfig{{Type: TypeFilter, Expr: "topic_segments[3] == 'x'"}}}
	ch, err := Compile(open, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, err = ch.Process(&message.Envelope{ID: "1", Topic: "factory/line-1/data", Payload: []byte("{}")})
	permanent(t, err)
}
