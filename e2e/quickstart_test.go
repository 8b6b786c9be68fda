package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"
)

// stdoutLine is one line the stdout sender prints.
type stdoutLine struct {
	ID      string `json:"id"`
	Topic   string `json:"topic"`
	Payload string `json:"payload"`
}

// readStdout parses every complete JSON line a bridge printed on stdout.
func readStdout(t *testing.T, b *bridge) []stdoutLine {
	t.Helper()
	f, err := os.ReadFile(b.outPath)
	if err != nil {
		t.Fatal(err)
	}
	var out []stdoutLine
	sc := bufio.NewScanner(strings.NewReader(string(f)))
	for sc.Scan() {
		var l stdoutLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			if !strings.HasSuffix(string(f), "\n") {
				break // a line still being written
			}
			t.Fatalf("stdout line %q is not JSON: %v", sc.Text(), err)
		}
		out = append(out, l)
	}
	return out
}

// TestQuickstart_Blueprint runs blueprints/quickstart.yaml (the SQLite path
// made unique, the ports moved with the GOBRIDGE_*_LISTEN variables the
// README documents) as the README's quick start does: QoS 1 messages
// published to the embedded MQTT listener, and one POSTed to its HTTP
// ingest as the README's curl line does, come out on stdout, one JSON line
// each, with the topic, the payload and an envelope ID.
func TestQuickstart_Blueprint(t *testing.T) {
	needBinary(t)
	blueprint, err := os.ReadFile("../blueprints/quickstart.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg := string(blueprint)
	admin, listen, web, dir := freeAddr(t), freeAddr(t), freeAddr(t), t.TempDir()
	for old, repl := range map[string]string{
		"./data/outbox.db": dir + "/outbox.db",
		// kept as they are: the environment below moves the ports
		"${GOBRIDGE_ADMIN_LISTEN:-127.0.0.1:9090}": "", "${GOBRIDGE_MQTT_LISTEN:-127.0.0.1:1883}": "",
		"${GOBRIDGE_HTTP_LISTEN:-127.0.0.1:8080}": "",
	} {
		if !strings.Contains(cfg, old) {
			t.Fatalf("blueprint no longer contains %q; update this test", old)
		}
		if repl != "" {
			cfg = strings.ReplaceAll(cfg, old, repl)
		}
	}
	b := startBridge(t, dir, "quickstart", admin, cfg,
		"GOBRIDGE_ADMIN_LISTEN="+admin, "GOBRIDGE_MQTT_LISTEN="+listen, "GOBRIDGE_HTTP_LISTEN="+web)
	b.waitReady(t, 30*time.Second)

	const n = 10
	want := map[string]string{}
	var msgs [][2]string
	for i := range n {
		topic, payload := fmt.Sprintf("demo/hello-%d", i), fmt.Sprintf(`{"temp": %d}`, 20+i)
		msgs = append(msgs, [2]string{topic, payload})
		want[topic] = payload
	}
	publishAll(t, publisher(t, "tcp://"+listen, "quickstart-pub"), msgs, 20*time.Second)
	resp, err := http.Post("http://"+web+"/v1/publish/demo/posted", "application/json", strings.NewReader(`{"temp": 21}`))
	if err != nil {
		t.Fatal(err)
	}
	answer, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(answer), `"outcome":"committed"`) {
		t.Fatalf("POST answered %d %s", resp.StatusCode, answer)
	}
	want["demo/posted"] = `{"temp": 21}`
	var lines []stdoutLine
	waitFor(t, 20*time.Second, "every message printed on stdout", func() bool {
		lines = readStdout(t, b)
		return len(lines) >= len(want)
	})
	seen := map[string]bool{}
	for _, l := range lines {
		if want[l.Topic] != l.Payload || l.ID == "" || seen[l.Topic] {
			t.Errorf("stdout line %+v: want each published topic once, with its payload and an id", l)
		}
		seen[l.Topic] = true
	}
	if len(lines) != len(want) {
		t.Errorf("%d stdout lines, want %d", len(lines), len(want))
	}
}
