package bridge

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
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

// TestAdmin_BoundsOpenConnections: clients that connect to the admin
// listener and send nothing hold at most adminMaxConns connections; a
// request on one more waits until one of them closes.
func TestAdmin_BoundsOpenConnections(t *testing.T) {
	t.Parallel()
	s := newSink(t)
	rt := startBridge(t, parseConfig(t, listenerConfig(freeAddr(t), "127.0.0.1:0", "{type: memory}",
		fmt.Sprintf(`  - {id: sink, type: http, options: {url: %q}}`, s.srv.URL), `
  - {id: r, receiver: edge, topic: "#", sender: sink}`)))
	var idle []net.Conn
	for range 64 { // adminMaxConns
		c, err := net.Dial("tcp", rt.AdminAddr())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		idle = append(idle, c)
	}
	answered := make(chan int, 1)
	go func() { // on a connection of its own, not one kept alive from startBridge
		client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
		resp, err := client.Get("http://" + rt.AdminAddr() + "/healthz")
		if err != nil {
			answered <- 0
			return
		}
		resp.Body.Close()
		answered <- resp.StatusCode
	}()
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
