package routes_test

import (
	"strings"
	"testing"

	"github.com/gobridge/gobridge/routes"
)

// A SQLite outbox on a filesystem with less room than its sessions'
// max_outbox_bytes is a warning (DESIGN.md §11.8): a tmpfs of a few MiB
// cannot hold an outage sized at 1 TiB.
func TestCheck_WarnsWhenTheDiskCannotHoldTheOutboxLimits(t *testing.T) {
	dir := t.TempDir()
	cfg := `version: 1
bridge: {id: test}
stores: {outbox: {type: sqlite, options: {path: "` + dir + `/sub/outbox.db"}}}
receivers:
  - {id: edge, type: mqtt_listener, options: {allow_anonymous: true}, topics: [{topic: "#"}]}
senders:
  - {id: out, type: stdout}
routes:
  - {id: r, receiver: edge, topic: "#", sender: out, delivery_mode: shared_outbox, session: {id: s}, policy: {max_outbox_bytes: LIMIT}}
`
	for limit, want := range map[string]bool{"1099511627776000": true, "1024": false} {
		_, probs, err := routes.ParseWithEnv(strings.NewReader(strings.Replace(cfg, "LIMIT", limit, 1)), "t.yaml",
			func(string) (string, bool) { return "", false })
		if err != nil {
			t.Fatal(err)
		}
		got := false
		for _, p := range probs {
			got = got || p.Rule == "disk-space"
		}
		if got != want {
			t.Errorf("max_outbox_bytes %s: disk-space warning %v, want %v: %v", limit, got, want, probs)
		}
	}
}
