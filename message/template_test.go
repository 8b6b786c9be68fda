package message

import (
	"errors"
	"strings"
	"testing"
)

func testEnvelope(payload string) *Envelope {
	return &Envelope{
		ID:      "0190-id",
		Topic:   "factory/line-7/telemetry",
		Payload: []byte(payload),
		Headers: map[string]string{"Site": "berlin", "trace": "t-1"},
		QoS:     1,
	}
}

const samplePayload = `{"msg_id": 12345678901234567890, "temp": 81.5, "count": 1e6, "small": 42,
 "name": "press", "ok": true, "nothing": null,
 "sensors": [{"id": "s-1"}, {"id": "s-2", "tags": ["a", "<b>"]}],
 "nested": {"b": 2, "a": "x"}, "1": "numeric key", "huge": 123456789012345678901234567890}`

func TestTemplate_Render(t *testing.T) {
	t.Parallel()
	cases := []struct{ tmpl, want string }{
		{"plain", "plain"},
		{"", ""},
		{"{topic}", "factory/line-7/telemetry"},
		{"{topic.0}", "factory"},
		{"{topic.1}", "line-7"},
		{"{topic.2}", "telemetry"},
		{"site-{topic.1}-x", "site-line-7-x"},
		{"{id}", "0190-id"},
		{"{header.Site}", "berlin"},
		{"{header.site}", "berlin"},
		{"{header.trace}/{topic.1}", "t-1/line-7"},
		{"{payload.msg_id}", "12345678901234567890"},
		{"{payload.temp}", "81.5"},
		{"{payload.count}", "1000000"},
		{"{payload.small}", "42"},
		{"{payload.huge}", "123456789012345678901234567890"},
		{"{payload.name}", "press"},
		{"{payload.ok}", "true"},
		{"{payload.sensors.0.id}", "s-1"},
		{"{payload.sensors.1.tags}", `["a","<b>"]`},
		{"{payload.nested}", `{"a":"x","b":2}`},
		{"{payload.1}", "numeric key"},
		{"{{literal}} {{{topic.1}}}", "{literal} {line-7}"},
		{"}}{{", "}{"},
	}
	e := testEnvelope(samplePayload)
	for _, c := range cases {
		tmpl, err := ParseTemplate(c.tmpl)
		if err != nil {
			t.Fatalf("ParseTemplate(%q): %v", c.tmpl, err)
		}
		got, err := tmpl.Render(e, nil)
		if err != nil {
			t.Fatalf("Render(%q): %v", c.tmpl, err)
		}
		if got != c.want {
			t.Errorf("Render(%q) = %q, want %q", c.tmpl, got, c.want)
		}
		if tmpl.String() != c.tmpl {
			t.Errorf("String() = %q, want %q", tmpl.String(), c.tmpl)
		}
	}
}

func TestParseTemplate_Errors(t *testing.T) {
	t.Parallel()
	cases := []struct {
		tmpl   string
		offset int
	}{
		{"{", 0},
		{"a{topic", 1},
		{"ab}", 2},
		{"{}", 0},
		{"x{unknown}", 1},
		{"{topic.}", 0},
		{"{topic.a}", 0},
		{"{topic.-1}", 0},
		{"{topic.+1}", 0},
		{"{topic.99999999}", 0},
		{"{header.}", 0},
		{"{header}", 0},
		{"{payload}", 0},
		{"{payload.}", 0},
		{"{payload.a..b}", 0},
		{"{payload.a.}", 0},
		{"ok {topic {id}", 3},
		{"{ topic }", 0},
		{"{id}}", 4},
	}
	for _, c := range cases {
		_, err := ParseTemplate(c.tmpl)
		te, ok := errors.AsType[*TemplateError](err)
		if !ok {
			t.Errorf("ParseTemplate(%q) error = %v, want *TemplateError", c.tmpl, err)
			continue
		}
		if te.Offset != c.offset {
			t.Errorf("ParseTemplate(%q) offset = %d, want %d (%v)", c.tmpl, te.Offset, c.offset, err)
		}
	}
}

func TestTemplate_RenderMissingFields(t *testing.T) {
	t.Parallel()
	cases := []struct{ tmpl, payload, placeholder string }{
		{"{topic.3}", samplePayload, "topic.3"},
		{"{header.nope}", samplePayload, "header.nope"},
		{"{payload.absent}", samplePayload, "payload.absent"},
		{"{payload.nothing}", samplePayload, "payload.nothing"},
		{"{payload.sensors.2.id}", samplePayload, "payload.sensors.2.id"},
		{"{payload.sensors.x}", samplePayload, "payload.sensors.x"},
		{"{payload.name.first}", samplePayload, "payload.name.first"},
		{"{payload.a}", "not json", "payload.a"},
		{"{payload.a}", `{"a":1} trailing`, "payload.a"},
		{"{payload.a}", "", "payload.a"},
	}
	for _, c := range cases {
		_, err := mustParse(c.tmpl).Render(testEnvelope(c.payload), nil)
		fe, ok := errors.AsType[*FieldError](err)
		if !ok {
			t.Errorf("Render(%q) error = %v, want *FieldError", c.tmpl, err)
			continue
		}
		if fe.Placeholder != c.placeholder {
			t.Errorf("Render(%q) placeholder = %q, want %q", c.tmpl, fe.Placeholder, c.placeholder)
		}
	}
}

// A rendered payload field is the value the publisher wrote or an error,
// never a lossy stand-in: two messages whose keys differ must not render
// the same idempotency, ordering or coalesce key.
func TestTemplate_RenderIsExactOrFails(t *testing.T) {
	t.Parallel()
	cases := []struct{ payload, want string }{ // want "": a *FieldError
		{`{"id":12345678901234567890.5}`, "12345678901234567890.5"},
		{`{"id":12345678901234567891.5}`, "12345678901234567891.5"},
		{`{"id":1.2345678901234567891e19}`, "1.2345678901234567891e19"},
		{`{"id":0.1000000000000000000001}`, "0.1000000000000000000001"},
		{`{"id":81.50}`, "81.5"},
		{`{"id":1e2}`, "100"},
		{"{\"id\":\"a\xffb\"}", ""}, // invalid UTF-8 (encoding/json makes it U+FFFD)
		{"{\"id\":\"a\xfeb\"}", ""},
		{`{"id":"a\ud800b"}`, ""}, // a lone surrogate (also U+FFFD)
		{`{"id":"a\udfffb"}`, ""},
		{`{"id":"a\ufffdb"}`, "a\ufffdb"},
		{`{"id":"\ud83d\ude00 \\ud800"}`, "\U0001F600 \\ud800"},
	}
	tmpl := mustParse("{payload.id}")
	for _, c := range cases {
		got, err := tmpl.Render(testEnvelope(c.payload), nil)
		if c.want == "" {
			if fe, ok := errors.AsType[*FieldError](err); !ok || !strings.HasPrefix(fe.Reason, "payload is not JSON: ") {
				t.Errorf("Render(%q) = %q, %v; want a *FieldError saying why the payload is not JSON", c.payload, got, err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("Render(%q) = %q, %v; want %q", c.payload, got, err, c.want)
		}
	}
}

func TestTemplate_Introspection(t *testing.T) {
	t.Parallel()
	tmpl := mustParse("{topic.1}:{payload.a.b}:{{x}}")
	if tmpl.IsLiteral() {
		t.Error("IsLiteral() = true for a template with placeholders")
	}
	if got := tmpl.LiteralPrefix(); got != "" {
		t.Errorf("LiteralPrefix() = %q, want empty", got)
	}
	parts := tmpl.Split()
	if len(parts) != 4 || parts[0].IsLiteral() || !parts[3].IsLiteral() || parts[3].LiteralPrefix() != ":{x}" {
		t.Errorf("Split() = %d parts", len(parts))
	}
	lit := mustParse("just {{text}}")
	if !lit.IsLiteral() || lit.LiteralPrefix() != "just {text}" {
		t.Errorf("literal template: IsLiteral() = %v, LiteralPrefix() = %q", lit.IsLiteral(), lit.LiteralPrefix())
	}
}

func mustParse(s string) *Template {
	t, err := ParseTemplate(s)
	if err != nil {
		panic(err)
	}
	return t
}

func TestParsedPayload_DecodesOncePerSlice(t *testing.T) {
	t.Parallel()
	e := testEnvelope(`{"a": 1, "b": "two"}`)
	var p ParsedPayload
	a := mustParse("{payload.a}")
	b := mustParse("{payload.b}")
	if got, _ := a.Render(e, &p); got != "1" {
		t.Fatalf("a = %q", got)
	}
	first, _ := p.Value(e.Payload)
	p.val.(map[string]any)["b"] = "cached" // proves the second render reuses the decoding
	if got, _ := b.Render(e, &p); got != "cached" {
		t.Fatalf("b = %q, want the cached value", got)
	}
	if again, _ := p.Value(e.Payload); again.(map[string]any)["a"] != first.(map[string]any)["a"] {
		t.Fatal("Value decoded again for the same slice")
	}

	e.Payload = []byte(`{"a": 3, "b": "new"}`) // a processor assigned a new payload
	if got, _ := b.Render(e, &p); got != "new" {
		t.Fatalf("after new payload b = %q, want new", got)
	}

	v, err := p.Value([]byte("nope"))
	if !errors.Is(err, ErrNotJSON) || v != nil {
		t.Fatalf("Value(non-JSON) = %v, %v; want nil, ErrNotJSON", v, err)
	}
}

func TestTemplate_TopicSegmentDoesNotAllocate(t *testing.T) {
	e := testEnvelope("not json at all")
	tmpl := mustParse("{topic.1}")
	allocs := testing.AllocsPerRun(100, func() {
		if s, err := tmpl.Render(e, nil); err != nil || s != "line-7" {
			t.Fatalf("render = %q, %v", s, err)
		}
	})
	if allocs != 0 {
		t.Errorf("allocs = %v, want 0", allocs)
	}
}

func FuzzParseTemplate(f *testing.F) {
	for _, s := range []string{"{topic.1}", "a{{b}}c", "{payload.a.0.b}", "{header.X}-{id}", "{", "}", "{payload..}"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tmpl, err := ParseTemplate(s)
		if err != nil {
			if _, ok := errors.AsType[*TemplateError](err); !ok {
				t.Fatalf("error %v is not a *TemplateError", err)
			}
			return
		}
		if tmpl.String() != s {
			t.Fatalf("String() = %q, want %q", tmpl.String(), s)
		}
	})
}

func FuzzRender(f *testing.F) {
	f.Add("{payload.a.0}", "a/b", `{"a":[1]}`)
	f.Add("{topic.2}{header.h}", "a/b/c", `{}`)
	f.Add("{payload.x.y}", "", `[1,{"x":null}]`)
	f.Add("{payload.n}", "t", `{"n": 1e400}`)
	f.Fuzz(func(t *testing.T, tmpl, topic, payload string) {
		tp, err := ParseTemplate(tmpl)
		if err != nil {
			return
		}
		e := &Envelope{ID: "id", Topic: topic, Payload: []byte(payload), Headers: map[string]string{"h": "v"}}
		var p ParsedPayload
		s1, err1 := tp.Render(e, &p)
		s2, err2 := tp.Render(e, nil)
		if s1 != s2 || (err1 == nil) != (err2 == nil) {
			t.Fatalf("cached render %q/%v differs from fresh %q/%v", s1, err1, s2, err2)
		}
		if err1 != nil {
			if _, ok := errors.AsType[*FieldError](err1); !ok {
				t.Fatalf("error %v is not a *FieldError", err1)
			}
		}
	})
}

func BenchmarkTemplate_Render(b *testing.B) {
	e := testEnvelope(samplePayload)
	b.Run("topic_segment", func(b *testing.B) {
		tmpl := mustParse("{topic.1}")
		b.ReportAllocs()
		for b.Loop() {
			_, _ = tmpl.Render(e, nil)
		}
	})
	b.Run("mixed_cached_payload", func(b *testing.B) {
		tmpl := mustParse("site-{topic.1}/{payload.sensors.1.id}")
		var p ParsedPayload
		b.ReportAllocs()
		for b.Loop() {
			_, _ = tmpl.Render(e, &p)
		}
	})
}
