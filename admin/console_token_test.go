package admin_test

import (
	"net/http/httptest"
	"strings"
	"testing"

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
	t.Cleanup(srv.Close) // after the browser's cleanup

	bctx := browser(t, exe, token)
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
