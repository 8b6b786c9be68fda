package processors_test

import (
	"fmt"

	"github.com/gobridge/gobridge/message"
	"github.com/gobridge/gobridge/processors"
	"github.com/gobridge/gobridge/routes"
)

func ExampleCompile() {
	chain, err := processors.Compile(routes.RouteConfig{
		ID:          "telemetry",
		OrderingKey: "{topic.1}",
		Processors: []routes.ProcessorConfig{
			{Type: "filter", Expr: "payload.temp > 80"},
			{Type: "transform", Expr: "{'temp_c': payload.temp, 'line': topic_segments[1]}"},
			{Type: "set_headers", Headers: map[string]string{"site": "{topic.1}"}},
			{Type: "idempotency_key", From: "{topic.1}-{header.site}"},
		},
	}, 0)
	if err != nil {
		fmt.Println(err)
		return
	}
	e := &message.Envelope{ID: message.NewID(), Topic: "factory/line-7/telemetry", Payload: []byte(`{"temp": 81.5}`)}
	res, err := chain.Process(e)
	fmt.Println(res.Drop, err)
	fmt.Println(string(e.Payload), e.Headers["site"], e.ID, e.Key)

	_, err = processors.Compile(routes.RouteConfig{Processors: []routes.ProcessorConfig{
		{Type: "coalesce", Key: "{topic.one}"},
	}}, 0)
	fmt.Println(err)
	// Output:
	// false <nil>
	// {"line":"line-7","temp_c":81.5} line-7 line-7-line-7 line-7
	// processors[0].key (offset 0): template "{topic.one}" at offset 0: {topic.one}: topic segment must be a number 0..65535
}
