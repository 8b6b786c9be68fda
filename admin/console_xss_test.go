package admin_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/gobridge/gobridge/admin"
	"github.com/gobridge/gobridge/message"
	"github.com/gobridge/gobridge/stores"
)

// TestConsole_ShowsHostileDeadLettersAsText: a dead letter holds what
// publishers and targets wrote (its ID from a payload, topic, headers,
// payload, the target's answer in its reason); the console shows all of it
// as text, in the list and in the detail, and none of it runs.
func TestConsole_ShowsHostileDeadLettersAsText(t *testing.T) {
	exe := chromium(t)
	const evil = `<img src=x onerror="window.pwned=1"><script>window.pwned=1</script><svg onload="window.pwned=1">`
	st := openStore(t)
	dl := stores.Record{Session: "plant", Route: "alarms", CreatedAt: t0, State: stores.Dead, DeadAt: t0,
		DeadReason: "permanent: status 400: " + evil, LastError: "timeout " + evil,
		Envelope: message.Envelope{ID: "id" + evil, Topic: "line/" + evil, Payload: []byte(evil), QoS: 1,
			Headers: map[string]string{"x-" + evil: evil}}}
	if err := st.Write(t.Context(), &stores.Batch{Append: []stores.Record{dl}}); err != nil {
		t.Fatal(err)
	}
	j := admin.NewJournal(0)
	j.Register("plant", "alarms")
	srv := httptest.NewServer(admin.New(admin.Options{Store: storeOutbox{st}, Journal: j}))
	t.Cleanup(srv.Close) // after the browser's cleanup
	ctx, cancel := context.WithTimeout(browser(t, exe, ""), 30*time.Second)
	defer cancel()
	link := chromedp.CSS(fmt.Sprintf(`#dead a[data-act="show"][data-id=%q]`, dl.Envelope.ID))
	err := chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/console"), chromedp.WaitVisible(link), chromedp.Click(link),
		chromedp.WaitVisible(chromedp.CSS(`#dead tr[data-detail] pre`)))
	if err != nil {
		t.Fatalf("console: %v", err)
	}
	detail, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`#dead tr[data-detail]`)))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"topic: line/" + evil, "header x-" + evil + ": " + evil, "reason: permanent: status 400: " + evil} {
		if !strings.Contains(detail, want) {
			t.Errorf("the detail does not show %q as text:\n%s", want, detail)
		}
	}
	ran, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`window.pwned === 1 || document.querySelectorAll("main img, main script, main svg:not(.spark)").length > 0`))
	if err != nil || ran {
		t.Errorf("the page made elements from a dead letter's contents, or ran them (%v)", err)
	}
}
