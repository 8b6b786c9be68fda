package processors

import (
	"errors"
	"testing"

	"github.com/gobridge/gobridge/message"
	"github.com/gobridge/gobridge/routes"
	"github.com/gobridge/gobridge/senders"
)

// FuzzChain compiles a filter and a transform from fuzzed expressions, a
// set_headers and coalesce from a fuzzed template, and runs the chain on a
// fuzzed payload: nothing may panic, and every failure must be a permanent
// *ProcessError.
func FuzzChain(f *testing.F) {
	f.Add("payload.temp > 80", "{'t': payload.temp}", "{payload.t}", telemetry)
	f.Add("raw contains 'x'", "raw", "{topic.1}", "x")
	f.Add("payload.a[0].b", "payload.a", "{payload.a.0}", `{"a":[{"b":true}]}`)
	f.Add("len(topic_segments) > 1", "payload.n / 0", "{header.h}", `{"n":1e400}`)
	f.Add("qos == 1 and headers.x == nil", "map(payload, # * 2)", "{id}", `[1,2,3]`)
	f.Add("true", "1..1000000000", "{payload.x}", `{"x":null}`)
	f.Fuzz(func(t *testing.T, filter, transform, tmpl, payload string) {
		c, err := Compile(routes.RouteConfig{Processors: []routes.ProcessorConfig{
			{Type: TypeFilter, Expr: filter},
			{Type: TypeTransform, Expr: transform},
			{Type: TypeSetHeaders, Headers: map[string]string{"h": tmpl}},
			{Type: TypeCoalesce, Key: tmpl},
		}}, 0)
		if err != nil {
			if _, ok := errors.AsType[*CompileError](err); !ok {
				t.Fatalf("compile error %v is not a *CompileError", err)
			}
			return
		}
		e := &message.Envelope{ID: "id", Topic: "a/b/c", Payload: []byte(payload), QoS: 1}
		if _, err := c.Process(e); err != nil {
			if _, ok := errors.AsType[*senders.PermanentError](err); !ok {
				t.Fatalf("error %v is not permanent", err)
			}
			if _, ok := errors.AsType[*ProcessError](err); !ok {
				t.Fatalf("error %v does not wrap a *ProcessError", err)
			}
		}
	})
}

// BenchmarkChain runs filter + set_headers + idempotency_key on a ~200-byte
// JSON payload, the shape of a typical telemetry route.
func BenchmarkChain(b *testing.B) {
	c, err := Compile(routes.RouteConfig{
		OrderingKey: "{topic.1}",
		Processors: []routes.ProcessorConfig{
			{Type: TypeFilter, Expr: "payload.temp > 80 && payload.ok"},
			{Type: TypeSetHeaders, Headers: map[string]string{"site": "{topic.1}", "fw": "{payload.meta.fw}"}},
			{Type: TypeIdempotencyKey, From: "{payload.msg_id}"},
		},
	}, 0)
	if err != nil {
		b.Fatal(err)
	}
	payload := []byte(telemetry)
	b.SetBytes(int64(len(payload)))
	b.ReportAllocs()
	for b.Loop() {
		e := message.Envelope{ID: "id", Topic: "factory/line-7/telemetry", Payload: payload, QoS: 1}
		res, err := c.Process(&e)
		if err != nil || res.Drop {
			b.Fatalf("Process = %+v, %v", res, err)
		}
	}
}

// BenchmarkChain_TopicOnly is the hot path without payload access: a filter
// on the topic and a header from a topic segment.
func BenchmarkChain_TopicOnly(b *testing.B) {
	c, err := Compile(routes.RouteConfig{
		Processors: []routes.ProcessorConfig{
			{Type: TypeFilter, Expr: "topic startsWith 'factory/'"},
			{Type: TypeSetHeaders, Headers: map[string]string{"site": "{topic.1}"}},
		},
	}, 0)
	if err != nil {
		b.Fatal(err)
	}
	payload := []byte(telemetry)
	b.ReportAllocs()
	for b.Loop() {
		e := message.Envelope{ID: "id", Topic: "factory/line-7/telemetry", Payload: payload, QoS: 1}
		if _, err := c.Process(&e); err != nil {
			b.Fatal(err)
		}
	}
}
