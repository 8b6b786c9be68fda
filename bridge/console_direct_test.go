package bridge

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
)

// The console's routes and sessions count what a direct_or_outbox route
// delivers directly: a route whose target takes every message at once
// shows its deliveries and its session's last send, as /readyz counts it.
func TestConsole_DirectDeliveriesShowOnTheOverview(t *testing.T) {
	t.Parallel()
	s := newSink(t)
	addr, admin := freeAddr(t), freeAddr(t)
	store := fmt.Sprintf("{type: sqlite, options: {path: %q}}", filepath.Join(t.TempDir(), "outbox.db"))
	startBridge(t, parseConfig(t, listenerConfig(addr, admin, store,
		fmt.Sprintf(`  - {id: sink, type: http, options: {url: %q, timeout: 2s}}`, s.srv.URL), `
  - id: hybrid
    receiver: edge
    topic: "#"
    sender: sink
    delivery_mode: direct_or_outbox
    session: {id: s1}
    policy: {direct_timeout: 20s}`)))
	pub := publisher(t, "tcp://"+addr, "console-direct")
	var toks []paho.Token
	const n = 5
	for i := range n {
		toks = append(toks, pub.Publish("line/1", 1, false, msgID(i)))
	}
	waitTokens(t, toks, 20*time.Second)
	waitFor(t, 10*time.Second, "every message at the target", func() bool { return s.distinct() == n })
	code, body := httpGet(t, "http://"+admin+"/api/overview")
	var ov struct {
		Routes []struct {
			Route  string           `json:"route"`
			Totals map[string]int64 `json:"totals"`
		} `json:"routes"`
		Sessions []struct {
			ID         string     `json:"id"`
			LastSentAt *time.Time `json:"last_sent_at"`
		} `json:"sessions"`
	}
	if err := json.Unmarshal([]byte(body), &ov); err != nil || code != 200 {
		t.Fatalf("overview: %d %s: %v", code, body, err)
	}
	var got string
	for _, r := range ov.Routes {
		got += fmt.Sprintf("route %s ok %d; ", r.Route, r.Totals["ok"])
	}
	for _, s := range ov.Sessions {
		got += fmt.Sprintf("session %s sent %v; ", s.ID, s.LastSentAt != nil)
	}
	if want := fmt.Sprintf("route hybrid ok %d; session s1 sent true; ", n); got != want {
		t.Errorf("overview shows %q, want %q", got, want)
	}
}
