package admin_test

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/gobridge/gobridge/admin"
)

// The console authenticates with a token that is not ASCII: the config
// holds it as UTF-8, and so must the Authorization header the page sends
// (a browser sends a header string as Latin-1, and refuses characters
// beyond it).
func TestConsole_TokenBeyondASCII(t *testing.T) {
	exe := chromium(t)
	const token = "Schlüssel-€-\"<&>%"
	j := admin.NewJournal(0)
	j.Register("plant", "telemetry")
	srv := httptest.NewServer(admin.New(admin.Options{Journal: j, Token: token}))
	defer srv.Close()

	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	actx, cancelAlloc := chromedp.NewExecAllocator(ctx, chromedp.ExecPath(exe), chromedp.UserDataDir(t.TempDir()),
		chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true))
	defer cancelAlloc()
	bctx, cancelBrowser := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	dialogs := chromedp.Events(bctx, page.JavascriptDialogOpening)
	dialogDone := make(chan struct{})
	go func() { // answers every prompt with the token
		defer close(dialogDone)
		for _, err := range dialogs {
			if err != nil {
				return
			}
			_, _ = chromedp.Call(bctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: true, PromptText: token})
		}
	}()
	defer func() { cancelBrowser(); <-dialogDone }()
	// The first round ends with the dead letters table: an error, or (no
	// store here) the note that there is none.
	if err := chromedp.Do(bctx, chromedp.Navigate(srv.URL+"/console")); err != nil {
		t.Fatal(err)
	}
	dead, err := chromedp.Run(bctx, chromedp.Text(chromedp.CSS(`#dead td.empty`)))
	if err != nil {
		t.Fatal(err)
	}
	rows, err := chromedp.Run(bctx, chromedp.Evaluate[int](`document.querySelectorAll('#routes tr[data-route="telemetry"]').length`))
	if err != nil {
		t.Fatal(err)
	}
	if rows != 1 || !strings.Contains(dead, "no outbox store") {
		t.Fatalf("the console did not get past the token %q: routes shown %d, dead letters: %q", token, rows, dead)
	}
}
