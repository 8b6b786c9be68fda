package bearer_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/gobridge/gobridge/bearer"
)

// serve runs next behind Require(token) on a real socket.
func serve(t *testing.T, token string) string {
	t.Helper()
	srv := httptest.NewServer(bearer.Require(token, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte("inside"))
	})))
	t.Cleanup(srv.Close)
	return srv.URL
}

func get(t *testing.T, url, auth string) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), "GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct{ Error string }
	_ = json.NewDecoder(resp.Body).Decode(&body)
	return resp.StatusCode, resp.Header, body.Error
}

func TestRequire(t *testing.T) {
	url := serve(t, "s3cret")
	for _, auth := range []string{"", "Bearer", "Bearer ", "Bearer s3cre", "Bearer s3cret2", "Bearer S3CRET",
		"Basic s3cret", "s3cret", "Bearer\ts3cret", "Token s3cret", "Bearer s3cret s3cret"} {
		code, h, msg := get(t, url, auth)
		if code != http.StatusUnauthorized || h.Get("WWW-Authenticate") == "" || msg == "" {
			t.Errorf("Authorization %q: %d %q %q, want 401 with a reason", auth, code, h.Get("WWW-Authenticate"), msg)
		}
	}
	for _, auth := range []string{"Bearer s3cret", "bearer s3cret", "BEARER  s3cret ", " Bearer s3cret"} {
		if code, _, _ := get(t, url, auth); code != http.StatusOK {
			t.Errorf("Authorization %q: %d, want 200", auth, code)
		}
	}
}

func TestRequire_EmptyTokenRefusesEverything(t *testing.T) {
	url := serve(t, "")
	for _, auth := range []string{"", "Bearer", "Bearer ", "Bearer x"} {
		if code, _, _ := get(t, url, auth); code != http.StatusUnauthorized {
			t.Errorf("Authorization %q with no token configured: %d, want 401", auth, code)
		}
	}
}
