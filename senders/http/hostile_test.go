package http

import (
	"bufio"
	"io"
	nethttp "net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gobridge/gobridge/routes"
	"github.com/gobridge/gobridge/senders"
)

// raw is a target that answers every request with resp as written, then
// holds the connection open until the test ends.
func raw(t *testing.T, resp string) string {
	t.Helper()
	srv := httptest.NewServer(nethttp.HandlerFunc(func(w nethttp.ResponseWriter, r *nethttp.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		c, buf, err := nethttp.NewResponseController(w).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		defer c.Close()
		_, _ = buf.WriteString(resp)
		_ = buf.Flush()
		_, _ = bufio.NewReader(c).ReadByte() // until the client closes
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// A hostile target's answer ends up in the error text, which the drainer
// keeps as the record's last error, its dead-letter reason and the sender's
// last target error: it must stay short whatever the target sends.
func TestSender_TargetTextInErrorsIsBounded(t *testing.T) {
	long := strings.Repeat("x", 60<<10)
	for name, resp := range map[string]string{
		"malformed status line": long + "\r\n\r\n",
		"redirect location":     "HTTP/1.1 302 Found\r\nLocation: http://other/" + long + "\r\nContent-Length: 0\r\n\r\n",
	} {
		t.Run(name, func(t *testing.T) {
			err := sendOne(t, newSender(t, routes.SenderOptions{URL: raw(t, resp)}), envelope("x"))
			if class, _ := senders.Classify(err); class != senders.Transient {
				t.Fatalf("class %v (%v), want transient", class, err)
			}
			if n := len(err.Error()); n > 2*BodyInReason {
				t.Errorf("error text is %d bytes, want at most %d: %.200s…", n, 2*BodyInReason, err)
			}
		})
	}
}

// A target sending megabytes of response headers is refused before they are
// all held in memory (net/http's default allows 10 MiB per request in flight).
func TestSender_HugeResponseHeadersAreATargetFailure(t *testing.T) {
	url := raw(t, "HTTP/1.1 200 OK\r\nX-Junk: "+strings.Repeat("j", maxHeaderBytes+1)+"\r\nContent-Length: 0\r\n\r\n")
	err := sendOne(t, newSender(t, routes.SenderOptions{URL: url}), envelope("x"))
	if class, _ := senders.Classify(err); class != senders.Transient {
		t.Fatalf("class %v (%v), want transient", class, err)
	}
}

// A target that switches protocols and then says nothing must not hold the
// send forever: net/http's timeouts do not cover a switched connection (a
// hang here fails the test by go test -timeout).
func TestSender_SwitchingProtocolsThenSilenceIsTransient(t *testing.T) {
	url := raw(t, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\nConnection: Upgrade\r\n\r\n")
	err := sendOne(t, newSender(t, routes.SenderOptions{URL: url}), envelope("x"))
	if class, _ := senders.Classify(err); class != senders.Transient {
		t.Fatalf("class %v (%v), want transient", class, err)
	}
}
