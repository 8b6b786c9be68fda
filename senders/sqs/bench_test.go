package sqs

import (
	"fmt"
	"testing"

	"github.com/gobridge/gobridge/routes"
)

// BenchmarkSender_Send measures messages/s into the emulator, ten messages
// per Send, sent as one SendMessageBatch (batch_size 10) or as ten calls
// (batch_size 1). The ratio is what matters: the emulator's speed is not
// gobridge's.
func BenchmarkSender_Send(b *testing.B) {
	for _, size := range []int{10, 1} {
		name := "batched"
		if size == 1 {
			name = "single"
		}
		b.Run(fmt.Sprintf("%s_batch_size=%d", name, size), func(b *testing.B) {
			q := newQueue(b, false)
			s, err := New(b.Context(), routes.SenderConfig{ID: "bench", Options: routes.SenderOptions{
				QueueURL: q.queueURL, Endpoint: q.endpoint, Region: "us-east-1", BatchSize: size,
				Attributes: map[string]string{"line": "{topic.1}"},
			}}, nil)
			if err != nil {
				b.Fatal(err)
			}
			envs := envelopes(10, "factory/line-7/telemetry", func(int) string { return `{"temp":21.5,"line":"line-7","seq":123456}` })
			b.ResetTimer()
			for b.Loop() {
				for _, err := range s.Send(b.Context(), envs) {
					if err != nil {
						b.Fatal(err)
					}
				}
			}
			b.ReportMetric(float64(10*b.N)/b.Elapsed().Seconds(), "msg/s")
		})
	}
}
