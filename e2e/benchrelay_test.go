package e2e

// The "relay" variant of TestBench_EndToEnd: the least any bridge built on
// paho and net/http does per message, measured the way gobridge is. The test
// binary runs itself as a second process that subscribes with paho (QoS 1,
// acknowledging each message after its POST returned), POSTs each payload to
// the sink with net/http's default client, and does nothing else: no config,
// no metrics, no outbox, no concurrency. Its CPU per message is the floor
// under gobridge's direct_hold figure on the same machine.

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/gobridge/gobridge/internal/testservices"
)

// relayEnv holds "BROKER_URL TOPIC_FILTER SINK_URL" in the relay process.
const relayEnv = "GOBRIDGE_BENCH_RELAY"

// runRelay is the relay process's main, run by TestMain when relayEnv is
// set; it returns the exit code after SIGTERM.
func runRelay(spec string) int {
	f := strings.Fields(spec)
	if len(f) != 3 {
		fmt.Fprintf(os.Stderr, "%s=%q: want BROKER_URL TOPIC_FILTER SINK_URL\n", relayEnv, spec)
		return 2
	}
	broker, filter, sink := f[0], f[1], f[2]
	failed := make(chan error, 1)
	o := paho.NewClientOptions().AddBroker(broker).SetClientID(filter + "-relay").SetOrderMatters(true)
	c := paho.NewClient(o)
	if tok := c.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		fmt.Fprintf(os.Stderr, "relay: connect: %v\n", tok.Error())
		return 1
	}
	defer c.Disconnect(100)
	tok := c.Subscribe(filter, 1, func(_ paho.Client, m paho.Message) {
		resp, err := http.Post(sink, "application/octet-stream", bytes.NewReader(m.Payload()))
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		if err != nil {
			select {
			case failed <- err:
			default:
			}
		}
	})
	if !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		fmt.Fprintf(os.Stderr, "relay: subscribe: %v\n", tok.Error())
		return 1
	}
	fmt.Println("ready")
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, os.Interrupt)
	select {
	case <-stop:
		return 0
	case err := <-failed:
		fmt.Fprintf(os.Stderr, "relay: post: %v\n", err)
		return 1
	}
}

func benchRelay(t *testing.T, n, rate int) {
	mqttURL := testservices.MQTTURL(t)
	run := runID("bench-relay")
	s := newBenchSink(t, n, 0, -1)
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), relayEnv+"="+mqttURL+" "+run+"/# "+s.srv.URL)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start relay: %v", err)
	}
	t.Cleanup(func() { _ = cmd.Process.Signal(syscall.SIGTERM); _ = cmd.Wait() })
	line := make([]byte, len("ready\n"))
	if _, err := io.ReadFull(out, line); err != nil || string(line) != "ready\n" {
		t.Fatalf("relay did not start: %q %v", line, err)
	}
	pid := cmd.Process.Pid
	pub := publisher(t, mqttURL, run+"-pub")
	load := loadAvg()
	stopPerf := perfRecord(t, pid, variantName("relay", rate))
	defer stopPerf()
	cpu0, sw0 := procCPU(t, pid), procSwitches(pid)
	start := publishRange(t, pub, run, 0, n, 0, rate, nil)
	waitFor(t, 5*time.Minute, "every message at the sink", func() bool { return s.delivered() == n })
	cpu, sw := procCPU(t, pid)-cpu0, procSwitches(pid)-sw0
	stopPerf()
	_, last, _ := s.span(0, n)
	p50, p99 := s.latency(0, n)
	_, hwm := procMem(pid)
	report(t, "e2e", "variant", variantName("relay", rate), "n", n, "msg_s", float64(n)/last.Sub(start).Seconds(),
		"p50_ms", p50, "p99_ms", p99, "cpu_us_msg", float64(cpu.Microseconds())/float64(n),
		"ctxsw_msg", float64(sw)/float64(n),
		"hwm_mib", float64(hwm)/mib, "load", load)
}
