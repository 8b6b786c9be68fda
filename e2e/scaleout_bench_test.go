package e2e

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/gobridge/gobridge/internal/testservices"
)

// BenchmarkScaleOut runs 1 or 3 gobridge processes on one $share
// subscription and one DynamoDB outbox (DynamoDB Local), all on this
// machine, publishes 10,000 QoS 1 messages of about 40 bytes as fast as one
// paho client can, and reports ingest (first publish until every message
// was committed and acknowledged: gobridge_ingest_acked_total summed over the
// instances) and delivery (until the HTTP sink holds every message) in
// msg/s. Run with -benchtime 1x: each iteration starts its own processes.
func BenchmarkScaleOut(b *testing.B) {
	for _, instances := range []int{1, 3} {
		b.Run(fmt.Sprintf("instances=%d", instances), func(b *testing.B) {
			for range b.N {
				ingest, delivery := scaleOutRun(b, instances, 10_000)
				b.ReportMetric(ingest, "ingest_msg/s")
				b.ReportMetric(delivery, "delivered_msg/s")
			}
		})
	}
}

func scaleOutRun(b *testing.B, instances, n int) (ingest, delivery float64) {
	b.StopTimer()
	if binary == "" {
		b.Skip("needs the gobridge binary (not under -short)")
	}
	mqttURL := testservices.MQTTURL(b)
	ddb := testservices.DynamoDBEndpoint(b)
	run := runID("bench-scale")
	s := newSink(b)
	dir := b.TempDir()
	testservices.DropTablesAtCleanup(b, ddb, run+"-outbox")
	var bridges []*bridge
	for i := range instances {
		name := fmt.Sprintf("b%d", i+1)
		admin := freeAddr(b)
		br := startBridge(b, dir, name, admin, instanceConfig(run, name, admin, mqttURL, ddb, s.srv.URL, 6))
		br.waitReady(b, 60*time.Second) // one at a time: the first creates the table
		bridges = append(bridges, br)
	}
	pub := publisher(b, mqttURL, run+"-pub")
	b.StartTimer()
	start := time.Now()
	toks := make([]paho.Token, 0, n)
	for i := range n {
		body, _ := json.Marshal(map[string]any{"id": fmt.Sprintf("m-%05d", i), "n": i})
		toks = append(toks, pub.Publish(fmt.Sprintf("%s/line-%d/telemetry", run, i%20), 1, false, body))
	}
	waitTokens(b, toks, 5*time.Minute)
	var ingested time.Duration
	waitFor(b, 5*time.Minute, "every message committed and delivered", func() bool {
		if ingested == 0 {
			var acked float64
			for _, br := range bridges {
				acked += br.metric("gobridge_ingest_acked_total", `receiver="plant"`)
			}
			if acked >= float64(n) {
				ingested = time.Since(start)
			}
		}
		_, distinct := s.counts()
		return ingested > 0 && distinct >= n
	})
	delivered := time.Since(start)
	b.StopTimer()
	return float64(n) / ingested.Seconds(), float64(n) / delivered.Seconds()
}
