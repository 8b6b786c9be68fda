package bridge

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
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
	rt.Handle("GET /api/look", ok)

	for _, tc := range []struct {
		method, path, auth string
		want               int
	}{
		{"POST", "/api/poke", "", http.StatusUnauthorized},
		{"POST", "/api/poke", "Bearer wrong", http.StatusUnauthorized},
		{"POST", "/api/poke", "Bearer s3cret", http.StatusNoContent},
		{"GET", "/api/look", "", http.StatusUnauthorized},
		{"GET", "/api/look", "Bearer s3cret", http.StatusNoContent},
		{"GET", "http://attacker.example/api/look", "Bearer s3cret", http.StatusMisdirectedRequest},
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
