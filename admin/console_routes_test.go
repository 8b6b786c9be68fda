package admin_test

import (
	"context"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/gobridge/gobridge/admin"
	"github.com/gobridge/gobridge/stores"
)

// browser starts a headless chromium (exe) for the test, which answers every
// dialog: a prompt with answer, a confirmation with OK.
func browser(t *testing.T, exe, answer string) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	actx, cancelAlloc := chromedp.NewExecAllocator(ctx, chromedp.ExecPath(exe), chromedp.UserDataDir(t.TempDir()),
		chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true))
	bctx, cancelBrowser := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	dialogs := chromedp.Events(bctx, page.JavascriptDialogOpening)
	dialogDone := make(chan struct{})
	go func() {
		defer close(dialogDone)
		for _, err := range dialogs {
			if err != nil {
				return
			}
			_, _ = chromedp.Call(bctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: true, PromptText: answer})
		}
	}()
	t.Cleanup(func() { cancelBrowser(); <-dialogDone; cancelAlloc(); cancel() })
	return bctx
}

// TestConsole_OffersEveryRouteWithDeadLetters: "Drop all of route" and
// "Requeue all of route" act on the route picked in the dead letters'
// selector, which listed only the routes the journal knows (those with a
// drainer): the dead letters of a route renamed since, or made at ingest on
// a direct_hold route, were listed but could not be picked, so they could
// be dropped one by one only.
func TestConsole_OffersEveryRouteWithDeadLetters(t *testing.T) {
	exe := chromium(t)
	st := openStore(t)
	deadLetters(t, st, "renamed", 3, []byte("x"))
	j := admin.NewJournal(0)
	j.Register("plant", "alarms")
	srv := httptest.NewServer(admin.New(admin.Options{Store: storeOutbox{st}, Journal: j}))
	t.Cleanup(srv.Close) // after the browser's cleanup
	bctx := browser(t, exe, "")
	ctx, cancel := context.WithTimeout(bctx, 30*time.Second)
	defer cancel()
	err := chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/console"),
		chromedp.WaitReady(chromedp.CSS(`#deadRoute option[value="renamed"]`)),
		chromedp.SetValue(chromedp.CSS(`#deadRoute`), "renamed"),
		chromedp.Evaluate[chromedp.Void](`document.querySelector("#deadRoute").dispatchEvent(new Event("change")), undefined`),
		chromedp.WaitEnabled(chromedp.CSS(`#bulkDrop`)),
		chromedp.Click(chromedp.CSS(`#bulkDrop`)),
		chromedp.WaitVisible(chromedp.CSS(`#dead td.empty`)))
	if err != nil {
		t.Fatalf("drop all of route renamed in the console: %v", err)
	}
	if left, _, err := st.Dead(t.Context(), stores.DeadQuery{}); err != nil || len(left) != 0 {
		t.Errorf("%d dead letters left (%v), want none", len(left), err)
	}
}
