package bridge

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"testing"
	"time"
)

// TestHTTPIngest_ReloadWithoutChangeKeepsTheListener: README, reloading:
// a receiver whose config did not change "keeps running untouched:
// connections stay up". An http_listener whose headers option names a
// header in lower case was restarted by every reload (its open and
// keep-alive connections closed, requests waiting answered 503): New
// canonicalized the names in the config's own slice, so the running config
// no longer equalled the same file loaded again.
func TestHTTPIngest_ReloadWithoutChangeKeepsTheListener(t *testing.T) {
	t.Parallel()
	target := newKeyTarget(t)
	addr := freeAddr(t)
	yml := httpIngestConfig(t, addr, target.srv.URL, ", headers: [x-line]", "")
	rt := startBridge(t, parseConfig(t, yml))
	waitFor(t, 10*time.Second, "the http listener", func() bool { _, err := http.Get("http://" + addr + "/"); return err == nil })

	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	r := bufio.NewReader(conn)
	post := func(body string) (*http.Response, error) {
		_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := fmt.Fprintf(conn, "POST /v1/publish/plant/a HTTP/1.1\r\nHost: %s\r\nX-Line: 7\r\nContent-Length: %d\r\n\r\n%s", addr, len(body), body); err != nil {
			return nil, err
		}
		resp, err := http.ReadResponse(r, nil)
		if err == nil {
			resp.Body.Close()
		}
		return resp, err
	}
	if resp, err := post("before"); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("before the reload: %v %v", resp, err)
	}
	if err := rt.Reload(t.Context(), parseConfig(t, yml)); err != nil {
		t.Fatal(err)
	}
	if resp, err := post("after"); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("the keep-alive connection did not survive a reload of the same config: %v %v", resp, err)
	}
}
