package admin_test

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/gobridge/gobridge/bridge"
	"github.com/gobridge/gobridge/message"
	"github.com/gobridge/gobridge/routes"
	"github.com/gobridge/gobridge/stores"
)

var updateScreenshot = flag.Bool("update-screenshot", false, "write the console screenshot to docs/console.png")

// chromium returns the system browser, failing under CI=true when it is
// missing and skipping otherwise.
func chromium(t *testing.T) string {
	t.Helper()
	for _, p := range []string{os.Getenv("GOBRIDGE_CHROMIUM"), "/usr/bin/chromium", "/usr/bin/chromium-browser"} {
		if p == "" {
			continue
		}
		if _, err := exec.LookPath(p); err == nil {
			return p
		}
	}
	msg := "chromium not found: run `bash scripts/test-services.sh` (installs Debian's chromium) or set GOBRIDGE_CHROMIUM"
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// sink is the HTTP target: it rejects payloads containing "bad" with 400
// (a permanent failure), and everything while broken is set.
type sink struct {
	broken atomic.Bool
	got    chan string
}

func (s *sink) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	if s.broken.Load() || strings.Contains(string(b), "bad") {
		http.Error(w, "schema check failed: field temp missing", http.StatusBadRequest)
		return
	}
	select {
	case s.got <- string(b):
	default:
	}
	w.WriteHeader(http.StatusAccepted)
}

// startBridge runs a real bridge (bridge.Run) on a SQLite outbox whose
// route delivers to target, and returns its admin address and a second
// handle on the same store file (as `gobridge dlq` would open it).
func startBridge(t *testing.T, target string) (string, stores.Store) {
	t.Helper()
	dir := t.TempDir()
	db := filepath.Join(dir, "outbox.db")
	cfgPath := filepath.Join(dir, "bridge.yaml")
	yaml := fmt.Sprintf(`version: 1
bridge:
  id: line-7
  admin: {listen: "127.0.0.1:0", token: s3cret}
  shutdown_timeout: 5s
stores:
  outbox: {type: sqlite, options: {path: %q, sync: normal}}
receivers:
  - {id: edge, type: mqtt_listener, options: {listen: "127.0.0.2:0"}, topics: [{topic: "#", qos: 1}]}
senders:
  - {id: erp, type: http, options: {url: %q, timeout: 5s}}
routes:
  - id: telemetry
    receiver: edge
    topic: "factory/#"
    sender: erp
    delivery_mode: shared_outbox
    session: {id: plant, drain_interval: 100ms}
`, db, target)
	if err := os.WriteFile(cfgPath, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, probs, err := routes.Load(cfgPath)
	if err != nil || probs.HasErrors() {
		t.Fatalf("load config: %v %v", err, probs)
	}
	rt, err := bridge.New(cfg, bridge.Options{})
	if err != nil {
		t.Fatalf("bridge.New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- rt.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("bridge Run: %v", err)
		}
	})
	return rt.AdminAddr(), rt.Store()
}

func appendRecords(t *testing.T, st stores.Store, payloads ...string) []string {
	t.Helper()
	now := time.Now()
	recs := make([]stores.Record, len(payloads))
	ids := make([]string, len(payloads))
	for i, p := range payloads {
		ids[i] = message.NewID()
		recs[i] = stores.Record{Session: "plant", Route: "telemetry", CreatedAt: now,
			Envelope: message.Envelope{ID: ids[i], Topic: "factory/7/telemetry", Payload: []byte(p), QoS: 1, ReceivedAt: now}}
	}
	if err := st.Write(t.Context(), &stores.Batch{Append: recs}); err != nil {
		t.Fatal(err)
	}
	return ids
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond) // polling with a deadline, not synchronisation by sleep
	}
}

func TestConsole_RequeuesADeadLetterInTheBrowser(t *testing.T) {
	exe := chromium(t)
	sk := &sink{got: make(chan string, 100)}
	sk.broken.Store(true)
	target := httptest.NewServer(sk)
	defer target.Close()
	addr, st := startBridge(t, target.URL)
	base := "http://" + addr

	// The target rejects the message: the drainer dead-letters it.
	id := appendRecords(t, st, `{"temp": 21, "line": 7}`)[0]
	waitFor(t, "the dead letter", 15*time.Second, func() bool { _, err := getDead(t, st, id); return err == nil })
	appendRecords(t, st, `{"bad": true, "n": 1}`, `{"bad": true, "n": 2}`)
	sk.broken.Store(false) // the target is fixed

	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	actx, cancelAlloc := chromedp.NewExecAllocator(ctx,
		chromedp.ExecPath(exe), chromedp.UserDataDir(t.TempDir()),
		chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true), chromedp.NoFirstRun,
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.WindowSize(1200, 1000))
	defer cancelAlloc()
	bctx, cancelBrowser := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	// Every /api/ call needs the admin token: the page loads without it,
	// asks for it with prompt() and sends it as "Authorization: Bearer".
	// Answer the prompt.
	dialogs := chromedp.Events(bctx, page.JavascriptDialogOpening)
	prompts := make(chan string, 10)
	dialogDone := make(chan struct{})
	go func() {
		defer close(dialogDone)
		for ev, err := range dialogs {
			if err != nil {
				return
			}
			select { // never block: the deferred cancel waits for this goroutine
			case prompts <- ev.Message:
			default:
				t.Errorf("unexpected extra dialog %q", ev.Message)
			}
			_, _ = chromedp.Call(bctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: true, PromptText: "s3cret"})
		}
	}()
	defer func() { cancelBrowser(); <-dialogDone }()

	row := chromedp.CSS(fmt.Sprintf(`#dead tr[data-dead=%q]`, id))
	button := chromedp.CSS(fmt.Sprintf(`#dead button[data-act="requeue"][data-id=%q]`, id))
	if err := chromedp.Do(bctx, chromedp.Navigate(base+"/console")); err != nil {
		t.Fatalf("open console: %v", err)
	}
	if err := chromedp.Do(bctx, chromedp.WaitVisible(row)); err != nil {
		t.Fatalf("console shows no dead letter: %v", err)
	}
	select {
	case msg := <-prompts:
		if !strings.Contains(msg, "token") {
			t.Errorf("dialog %q, want the token prompt", msg)
		}
	default:
		t.Fatal("the console showed dead letters without asking for the admin token")
	}
	err := chromedp.Do(bctx,
		chromedp.WaitVisible(chromedp.CSS(`#routes tr[data-route="telemetry"] svg.spark`)),
		chromedp.Click(button),
		chromedp.WaitNotPresent(row),
	)
	if err != nil {
		t.Fatalf("console: %v", err)
	}
	if tok, err := chromedp.Run(bctx, chromedp.Evaluate[string](`sessionStorage.getItem("gobridge.admin.token")`)); err != nil || tok != "s3cret" {
		t.Errorf("token in sessionStorage = %q, %v", tok, err)
	}
	select {
	case got := <-sk.got:
		if got != `{"temp": 21, "line": 7}` {
			t.Fatalf("sink received %q", got)
		}
	case <-ctx.Done():
		t.Fatal("the requeued message never reached the sink")
	}
	okRow := chromedp.CSS(`#journal tr[data-outcome="ok"]`)
	if err := chromedp.Do(bctx, chromedp.WaitVisible(okRow)); err != nil {
		t.Fatalf("journal shows no ok delivery: %v", err)
	}
	if a, err := chromedp.Run(bctx, chromedp.AttributeValue(okRow, "data-route")); err != nil || a.Value != "telemetry" {
		t.Fatalf("ok row of route %q: %v", a.Value, err)
	}
	// The API agrees: the requeued record's new ID was delivered. It
	// answers only with the token.
	resp, err := http.Get(base + "/api/journal?route=telemetry")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("GET /api/journal without the token: %d, want 401", resp.StatusCode)
	}
	req, _ := http.NewRequestWithContext(ctx, "GET", base+"/api/journal?route=telemetry", nil)
	req.Header.Set("Authorization", "Bearer s3cret")
	if resp, err = http.DefaultClient.Do(req); err != nil {
		t.Fatal(err)
	}
	var j struct {
		Entries []struct{ ID, Outcome string } `json:"entries"`
	}
	err = json.NewDecoder(resp.Body).Decode(&j)
	resp.Body.Close()
	if err != nil {
		t.Fatalf("decode /api/journal: %v", err)
	}
	if len(j.Entries) == 0 || j.Entries[0].Outcome != "ok" || j.Entries[0].ID == id {
		t.Errorf("journal = %+v", j.Entries)
	}

	// Some traffic for the screenshot: deliveries and the two dead letters.
	more := make([]string, 40)
	for i := range more {
		more[i] = fmt.Sprintf(`{"temp": %d}`, 20+i%5)
	}
	appendRecords(t, st, more...)
	for range more {
		select {
		case <-sk.got:
		case <-ctx.Done():
			t.Fatal("deliveries stalled")
		}
	}
	err = chromedp.Do(bctx,
		chromedp.Reload(),
		chromedp.WaitVisible(chromedp.CSS(`#dead tr[data-dead]`)),
		chromedp.WaitVisible(okRow),
	)
	if err != nil {
		t.Fatalf("reload: %v", err)
	}
	png, err := chromedp.Run(bctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	if len(png) < 1000 {
		t.Fatalf("screenshot is %d bytes", len(png))
	}
	if p := os.Getenv("GOBRIDGE_PHONE_SCREENSHOT"); p != "" { // a look at the phone layout
		if err := chromedp.Do(bctx, chromedp.EmulateViewport(390, 844, chromedp.EmulateScale(2)), chromedp.Reload(), chromedp.WaitVisible(okRow)); err != nil {
			t.Fatal(err)
		}
		phone, err := chromedp.Run(bctx, chromedp.CaptureScreenshot())
		if err != nil {
			t.Fatal(err)
		}
		_ = os.WriteFile(p, phone, 0o644)
	}
	out := filepath.Join(t.TempDir(), "console.png")
	if *updateScreenshot {
		out = filepath.Join("..", "docs", "console.png")
	}
	if err := os.WriteFile(out, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s (%d bytes)", out, len(png))
}
