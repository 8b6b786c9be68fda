package httplistener

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gobridge/gobridge/internal/churn"
	"github.com/gobridge/gobridge/receivers"
)

// TestReceiver_RequestChurnLeavesNothingBehind sends thousands of requests
// over raw connections: answered ones (settled at once), ones whose client
// closes mid-body, and ones whose client closes while the request waits for
// its settlement (the sink settles it only once the request's context
// ended, as a route that gave up would). Goroutines, heap, descriptors and
// the window's counts must not grow with the number of requests.
func TestReceiver_RequestChurnLeavesNothingBehind(t *testing.T) {
	var sinkWG sync.WaitGroup
	sink := sinkFunc(func(ctx context.Context, m receivers.Message, done func()) {
		settle := func() { m.Report(receivers.Settled{ID: "x", Outcome: receivers.OutcomeCommitted}); done() }
		if string(m.Payload) != "hold" {
			settle()
			return
		}
		sinkWG.Go(func() { <-ctx.Done(); settle() })
	})
	b := setup(t, Options{}, sink)
	t.Cleanup(sinkWG.Wait)
	addr := b.r.Addr().String()
	request := func(body string, length int) string {
		return fmt.Sprintf("POST /v1/publish/plant/churn HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Length: %d\r\n\r\n%s",
			testToken, length, body)
	}
	round := func(i int) {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
		switch i % 3 {
		case 0: // answered
			if _, err := conn.Write([]byte(request("ok", 2))); err != nil {
				t.Fatal(err)
			}
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil || resp.StatusCode != http.StatusOK {
				t.Fatalf("round %d: %v %v", i, resp, err)
			}
			resp.Body.Close()
		case 1: // closed mid-body
			if _, err := conn.Write([]byte(request(strings.Repeat("a", 100), 5000))); err != nil {
				t.Fatal(err)
			}
		case 2: // closed while waiting for the settlement
			before := b.r.Stats().Received
			if _, err := conn.Write([]byte(request("hold", 4))); err != nil {
				t.Fatal(err)
			}
			deadline := time.Now().Add(time.Minute)
			for b.r.Stats().Received == before && time.Now().Before(deadline) {
				time.Sleep(time.Millisecond) // polling until the sink has it
			}
		}
	}
	counts := func() map[string]int {
		st := b.r.Stats()
		return map[string]int{"inflight": st.InFlight, "inflight_bytes": int(st.InFlightBytes), "slots": len(b.r.slots)}
	}
	n2 := 1500
	if s := os.Getenv("CHURN_ROUNDS"); s != "" {
		n2, _ = strconv.Atoi(s)
	}
	churn.Check(t, n2/5, n2, churn.Tolerance{Goroutines: 5, FDs: 3, HeapBytes: 512 << 10}, counts, round)
}

// sinkFunc adapts a function to a receivers.Sink.
type sinkFunc func(ctx context.Context, m receivers.Message, done func())

func (f sinkFunc) Accept(ctx context.Context, m receivers.Message, done func()) { f(ctx, m, done) }
