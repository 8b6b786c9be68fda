package bridge

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"
	"time"

	"github.com/gobridge/gobridge/admin"
	"github.com/gobridge/gobridge/message"
	"github.com/gobridge/gobridge/routes"
	"github.com/gobridge/gobridge/stores"
)

// TestAdmin_RegisteredEndpointsAreGuarded: endpoints other parts register
// get the admin API's guards: the token on every call, the Host check.
func TestAdmin_RegisteredEndpointsAreGuarded(t *testing.T) {
	t.Parallel()
	s := newSink(t)
	yml := listenerConfig(freeAddr(t), "", "{type: memory}",
		fmt.Sprintf(`  - {id: sink, type: http, options: {url: %q}}`, s.srv.URL), `
  - {id: r, receiver: edge, topic: "#", sender: sink}`)
	cfg := parseConfig(t, yml)
	cfg.Bridge.Admin.Token = "s3cret"
	rt, err := New(cfg, Options{Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rt.closeAll)
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })
	rt.HandleMutating("POST /api/poke", ok)

	for _, tc := range []struct {
		method, path, auth string
		want               int
	}{
		{"POST", "/api/poke", "", http.StatusUnauthorized},
		{"POST", "/api/poke", "Bearer wrong", http.StatusUnauthorized},
		{"POST", "/api/poke", "Bearer s3cret", http.StatusNoContent},
		{"POST", "http://attacker.example/api/poke", "Bearer s3cret", http.StatusMisdirectedRequest},
		{"GET", "/healthz", "", http.StatusOK},
		{"GET", "http://attacker.example/healthz", "", http.StatusOK},
	} {
		target := tc.path
		if target[0] == '/' {
			target = "http://127.0.0.1:9090" + target
		}
		req := httptest.NewRequest(tc.method, target, nil)
		if tc.auth != "" {
			req.Header.Set("Authorization", tc.auth)
		}
		rec := httptest.NewRecorder()
		rt.Handler().ServeHTTP(rec, req)
		if rec.Code != tc.want {
			t.Errorf("%s %s (auth %q): %d, want %d", tc.method, tc.path, tc.auth, rec.Code, tc.want)
		}
	}
}

// TestAdmin_APIPathsAreNotRedirectedToAnotherAction: a path that is not
// clean reaches the admin API as sent, which refuses it (404). The bridge's
// mux redirected it (307, which a client repeats as a POST) to its clean
// form, another action: POST /api/dead-letters//requeue?route=r, an empty
// ID, is the bulk requeue of r once cleaned, and `gobridge dlq requeue
// --to-route r .` sent /api/dead-letters/./requeue?route=r.
func TestAdmin_APIPathsAreNotRedirectedToAnotherAction(t *testing.T) {
	t.Parallel()
	s := newSink(t)
	cfg := parseConfig(t, listenerConfig(freeAddr(t), "127.0.0.1:0", "{type: memory}",
		fmt.Sprintf(`  - {id: sink, type: http, options: {url: %q}}`, s.srv.URL), `
  - {id: r, receiver: edge, topic: "#", sender: sink, delivery_mode: shared_outbox, session: {id: plant}}`))
	rt, err := New(cfg, Options{Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rt.closeAll)
	dead := []stores.Record{
		{Session: "plant", Route: "r", State: stores.Dead, DeadReason: "422", Envelope: message.Envelope{ID: "one", Topic: "a"}},
		{Session: "plant", Route: "r", State: stores.Dead, DeadReason: "422", Envelope: message.Envelope{ID: "two", Topic: "a"}},
	}
	if err := rt.Store().Write(t.Context(), &stores.Batch{Append: dead}); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"/api/dead-letters//requeue?route=r", "/api/dead-letters/./requeue?route=r",
		"/api/dead-letters//drop?route=r", "/api/x/../dead-letters/requeue?route=r"} {
		req := httptest.NewRequest("POST", "http://127.0.0.1:9090"+p, nil)
		req.Header.Set("X-Requested-By", "test")
		rec := httptest.NewRecorder()
		rt.Handler().ServeHTTP(rec, req)
		if rec.Code != http.StatusNotFound {
			t.Errorf("POST %s: %d (Location %q), want 404", p, rec.Code, rec.Header().Get("Location"))
		}
	}
	if left, _, err := rt.Store().Dead(t.Context(), stores.DeadQuery{}); err != nil || len(left) != 2 {
		t.Errorf("%d dead letters left (%v), want both", len(left), err)
	}
}

// dialFrom opens n connections to addr from the loopback address from.
func dialFrom(t *testing.T, from net.IP, addr string, n int) []net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: from}}
	var cs []net.Conn
	for range n {
		c, err := d.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		cs = append(cs, c)
	}
	return cs
}

// getHealthz asks /healthz on a connection of its own (not one kept alive
// from an earlier request) and sends the status (0: no answer) to answered.
func getHealthz(addr string, answered chan<- int) {
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Get("http://" + addr + "/healthz")
	if err != nil {
		answered <- 0
		return
	}
	resp.Body.Close()
	answered <- resp.StatusCode
}

// TestAdmin_BoundsOpenConnections: clients that connect to the admin
// listener and send nothing hold at most adminMaxConns connections; a
// request on one more waits until one of them closes.
func TestAdmin_BoundsOpenConnections(t *testing.T) {
	t.Parallel()
	rt := startBridge(t, adminConfig(t, ""))
	// Two hosts, each within receivers.PendingPerAddress, fill the cap.
	idle := dialFrom(t, net.IPv4(127, 0, 0, 2), rt.AdminAddr(), 32)
	idle = append(idle, dialFrom(t, net.IPv4(127, 0, 0, 3), rt.AdminAddr(), 32)...)
	answered := make(chan int, 1)
	go getHealthz(rt.AdminAddr(), answered)
	select {
	case c := <-answered:
		t.Fatalf("/healthz answered %d with %d idle connections open", c, len(idle))
	case <-time.After(300 * time.Millisecond): // a negative check: a slow machine can only make it pass
	}
	idle[0].Close()
	if c := <-answered; c != http.StatusOK {
		t.Fatalf("/healthz after a connection closed: %d", c)
	}
}

// TestAdmin_OneAddressCannotHoldEveryConnection: one host opening
// adminMaxConns silent connections kept every scraper, console and CLI out
// until the header timeout, again and again. An address holds at most
// receivers.PendingPerAddress connections without the admin token; a
// connection that sent a request with the token no longer counts.
func TestAdmin_OneAddressCannotHoldEveryConnection(t *testing.T) {
	t.Parallel()
	rt, err := New(adminConfig(t, "s3cret"), Options{Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	// Silent connections are held until the header timeout, not closed by it.
	rt.adminTimeouts = admin.Timeouts{ReadHeader: 5 * time.Minute, Read: 5 * time.Minute, Idle: 5 * time.Minute, Answer: time.Minute}
	startRun(t, rt)
	silent := dialFrom(t, net.IPv4(127, 0, 0, 2), rt.AdminAddr(), 70) // more than adminMaxConns
	_ = silent[69].SetReadDeadline(time.Now().Add(time.Minute))
	if _, err := silent[69].Read(make([]byte, 1)); errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatal("the 70th silent connection from one address was kept open")
	}
	answered := make(chan int, 1)
	getHealthz(rt.AdminAddr(), answered)
	if c := <-answered; c != http.StatusOK {
		t.Fatalf("/healthz from another address: %d", c)
	}
	for _, c := range silent {
		c.Close()
	}
	// 40 connections from 127.0.0.3, each opened after the last sent a
	// request with the token, stay open and keep working: they were admitted.
	var conns []net.Conn
	ask := func(c net.Conn) int {
		_ = c.SetDeadline(time.Now().Add(time.Minute))
		if _, err := io.WriteString(c, "GET /api/overview HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer s3cret\r\n\r\n"); err != nil {
			return 0
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return 0
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	for i := range 40 {
		c := dialFrom(t, net.IPv4(127, 0, 0, 3), rt.AdminAddr(), 1)[0]
		if st := ask(c); st != http.StatusOK {
			t.Fatalf("connection %d with the token: %d", i, st)
		}
		conns = append(conns, c)
	}
	for i, c := range conns {
		if st := ask(c); st != http.StatusOK {
			t.Fatalf("connection %d with the token, second request: %d", i, st)
		}
	}
}

// adminConfig is a bridge with an admin listener on a free port (and the
// admin token, when not empty).
func adminConfig(t *testing.T, token string) *routes.Config {
	t.Helper()
	s := newSink(t)
	cfg := parseConfig(t, listenerConfig(freeAddr(t), "127.0.0.1:0", "{type: memory}",
		fmt.Sprintf(`  - {id: sink, type: http, options: {url: %q}}`, s.srv.URL), `
  - {id: r, receiver: edge, topic: "#", sender: sink}`))
	cfg.Bridge.Admin.Token = routes.Secret(token)
	return cfg
}
