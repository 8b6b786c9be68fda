package mqtt

import (
	"crypto/tls"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/gobridge/gobridge/receivers/internal/testsink"
	"github.com/gobridge/gobridge/receivers/internal/testtls"
)

// proxiedBrokerEnv names, in the child process of
// TestReceiver_TLSThroughAllProxy, the broker URL to reach through the
// proxy that all_proxy names.
const proxiedBrokerEnv = "GOBRIDGE_TEST_PROXIED_BROKER"

// TestReceiver_TLSThroughAllProxy: with all_proxy set, paho dials ssl://
// brokers through that proxy, and so must the receiver's own dial (a leased
// session, MayConnect): the broker's name resolves only at the proxy here,
// as on a network whose way out is the proxy. The proxy's environment is
// read once per process (golang.org/x/net/proxy), so the receivers run in a
// child process of the test binary started with all_proxy set.
func TestReceiver_TLSThroughAllProxy(t *testing.T) {
	if url := os.Getenv(proxiedBrokerEnv); url != "" {
		for _, gated := range []bool{false, true} {
			t.Run(fmt.Sprintf("gated=%v", gated), func(t *testing.T) {
				o := config(url, unique(t), "proxied/#")
				o.TLS = &tls.Config{InsecureSkipVerify: true} // the name is not the certificate's
				if gated {
					o.MayConnect = func() error { return nil } // the receiver's own dial
				}
				r := newReceiver(t, o, testsink.New(true))
				run(t, r)
				waitSubscribed(t, r)
			})
		}
		return
	}
	t.Parallel()
	files := testtls.Write(t)
	m := startMosquitto(t, "cafile "+files.CAFile, "certfile "+files.CertFile, "keyfile "+files.KeyFile)
	proxy, dialled := startSOCKS5(t)
	cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestReceiver_TLSThroughAllProxy$", "-test.count=1", "-test.v")
	for _, kv := range os.Environ() {
		if name, _, _ := strings.Cut(kv, "="); !strings.EqualFold(name, "all_proxy") && !strings.EqualFold(name, "no_proxy") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "all_proxy=socks5://"+proxy, fmt.Sprintf("%s=ssl://mqtt-broker.invalid:%d", proxiedBrokerEnv, m.port))
	out, err := cmd.CombinedOutput()
	t.Logf("child:\n%s", out)
	if err != nil {
		t.Fatalf("the receivers did not both connect through the proxy: %v", err)
	}
	if n := dialled.Load(); n < 2 {
		t.Fatalf("the proxy relayed %d connections, want one per receiver", n)
	}
}

// startSOCKS5 runs a SOCKS5 proxy (no authentication, CONNECT only) that
// relays every host name to 127.0.0.1 and counts the connections it
// relayed.
func startSOCKS5(t *testing.T) (addr string, dialled *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dialled = new(atomic.Int64)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var open []net.Conn
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			open = append(open, c)
			mu.Unlock()
			wg.Go(func() {
				defer c.Close()
				up, err := socks5Connect(c)
				if err != nil {
					return
				}
				defer up.Close()
				mu.Lock()
				open = append(open, up)
				mu.Unlock()
				dialled.Add(1)
				wg.Go(func() { _, _ = io.Copy(up, c); up.Close() }) // ends when c or up closes
				_, _ = io.Copy(c, up)
			})
		}
	})
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range open {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String(), dialled
}

// socks5Connect answers a client's greeting and CONNECT request (RFC 1928)
// and dials the requested port on 127.0.0.1.
func socks5Connect(c net.Conn) (net.Conn, error) {
	head := make([]byte, 2)
	if _, err := io.ReadFull(c, head); err != nil || head[0] != 5 {
		return nil, fmt.Errorf("greeting: %v", err)
	}
	if _, err := io.ReadFull(c, make([]byte, head[1])); err != nil { // the methods offered
		return nil, err
	}
	if _, err := c.Write([]byte{5, 0}); err != nil { // no authentication
		return nil, err
	}
	req := make([]byte, 4) // version, CONNECT, reserved, address type
	if _, err := io.ReadFull(c, req); err != nil || req[1] != 1 {
		return nil, fmt.Errorf("request: %v", err)
	}
	n := map[byte]int{1: 4, 4: 16}[req[3]]
	if req[3] == 3 { // a host name, its length first
		l := make([]byte, 1)
		if _, err := io.ReadFull(c, l); err != nil {
			return nil, err
		}
		n = int(l[0])
	}
	dest := make([]byte, n+2)
	if _, err := io.ReadFull(c, dest); err != nil {
		return nil, err
	}
	up, err := net.Dial("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(int(binary.BigEndian.Uint16(dest[n:])))))
	if err != nil {
		_, _ = c.Write([]byte{5, 5, 0, 1, 0, 0, 0, 0, 0, 0}) // connection refused
		return nil, err
	}
	if _, err := c.Write([]byte{5, 0, 0, 1, 0, 0, 0, 0, 0, 0}); err != nil {
		up.Close()
		return nil, err
	}
	return up, nil
}
