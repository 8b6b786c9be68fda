// Package testservices gives tests the addresses of the real services that
// scripts/test-services.sh starts: Mosquitto, an SQS-compatible server
// (fauxqs) and DynamoDB Local.
//
// A missing service fails the test when CI is set (CI must never skip what it
// was meant to prove) and skips it locally, saying how to start the services.
package testservices

import (
	"bytes"
	"context"
	"math/rand/v2"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

const howTo = "start the test services with `bash scripts/test-services.sh` " +
	"and `. /tmp/gobridge-services/state/services.env` (or run `bash scripts/test.sh`)"

// MQTTURL returns the Mosquitto URL (tcp://127.0.0.1:11883 by default, or
// GOBRIDGE_TEST_MQTT_URL) after checking that something listens there.
func MQTTURL(t testing.TB) string {
	t.Helper()
	return require(t, "Mosquitto", "GOBRIDGE_TEST_MQTT_URL", "tcp://127.0.0.1:11883")
}

// SQSEndpoint returns the SQS-compatible endpoint (GOBRIDGE_TEST_SQS_ENDPOINT,
// default http://127.0.0.1:14566) and sets test credentials for the AWS SDK.
func SQSEndpoint(t testing.TB) string {
	t.Helper()
	u := require(t, "the SQS emulator (fauxqs)", "GOBRIDGE_TEST_SQS_ENDPOINT", "http://127.0.0.1:14566")
	awsTestEnv(t)
	return u
}

// DynamoDBEndpoint returns the DynamoDB Local endpoint
// (GOBRIDGE_TEST_DYNAMODB_ENDPOINT, default http://127.0.0.1:14568) and sets
// test credentials for the AWS SDK.
func DynamoDBEndpoint(t testing.TB) string {
	t.Helper()
	u := require(t, "DynamoDB Local", "GOBRIDGE_TEST_DYNAMODB_ENDPOINT", "http://127.0.0.1:14568")
	awsTestEnv(t)
	return u
}

func awsTestEnv(t testing.TB) {
	for k, v := range map[string]string{
		"AWS_ACCESS_KEY_ID":         "test",
		"AWS_SECRET_ACCESS_KEY":     "test",
		"AWS_REGION":                "us-east-1",
		"AWS_EC2_METADATA_DISABLED": "true",
	} {
		if os.Getenv(k) == "" {
			os.Setenv(k, v)
		}
	}
}

func require(t testing.TB, name, env, def string) string {
	t.Helper()
	raw := os.Getenv(env)
	if raw == "" {
		raw = def
	}
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		t.Fatalf("%s=%q is not a URL: %v", env, raw, err)
	}
	conn, err := net.DialTimeout("tcp", u.Host, 2*time.Second)
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s is not reachable at %s (%v); CI must start it: %s", name, u.Host, err, howTo)
		}
		t.Skipf("%s is not reachable at %s (%v); %s", name, u.Host, err, howTo)
	}
	conn.Close()
	return raw
}

// handedOut holds the ports FreeAddr returned in this process.
var handedOut sync.Map

// FreeAddr returns a loopback address nothing listened on a moment ago, for
// a server the test starts later (gobridge's admin API, a listener,
// mosquitto), and never the same port twice in this process. The port is
// drawn at random below the kernel's ephemeral range where there is room:
// a port the kernel hands out (to a listener on :0, or as the local port of
// any outgoing connection of the tests running in parallel) may be taken
// again before the test binds it; CI failed on that ("address already in
// use").
func FreeAddr(t testing.TB) string {
	t.Helper()
	lo, hi := 10000, ephemeralLow()
	for draw := 0; ; draw++ {
		addr := "127.0.0.1:0"
		if hi-lo >= 1000 && draw < 100 {
			addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(lo+rand.IntN(hi-lo)))
		}
		ln, err := net.Listen("tcp", addr)
		if err != nil && addr != "127.0.0.1:0" {
			continue // taken: draw again
		}
		if err != nil {
			t.Fatal(err)
		}
		port := ln.Addr().(*net.TCPAddr).Port
		_ = ln.Close()
		if _, taken := handedOut.LoadOrStore(port, true); !taken {
			return net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		}
	}
}

// ephemeralLow is the lowest port of the kernel's ephemeral range (Linux;
// 0 where it cannot be read).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	n, _ := strconv.Atoi(f[0])
	return n
}

// Start runs run(ctx) in a goroutine, as a component's Run(ctx) error. With
// ready set it waits for ready to close (failing the test if Run returns
// first). The returned stop, also called at cleanup, cancels ctx and fails
// the test when Run returns an error or is not back within 30 s.
func Start(t testing.TB, run func(context.Context) error, ready <-chan struct{}) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- run(ctx) }()
	if ready != nil {
		select {
		case <-ready:
		case err := <-errc:
			cancel()
			t.Fatalf("Run: %v", err)
		}
	}
	stop = sync.OnceFunc(func() {
		cancel()
		select {
		case err := <-errc:
			if err != nil {
				t.Errorf("Run returned %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("Run did not return within 30s of cancel")
		}
	})
	t.Cleanup(stop)
	return stop
}

// Buffer is a bytes.Buffer safe for a writer and a reader goroutine, for
// the logs of a component under test.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
