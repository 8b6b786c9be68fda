package http

import (
	"bytes"
	"fmt"
	"io"
	nethttp "net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/gobridge/gobridge/redact"
	"github.com/gobridge/gobridge/senders"
)

// Limits on reading a response body.
const (
	// BodyInReason is how many bytes of an error response body go into a
	// permanent error's reason.
	BodyInReason = 512
	// drainLimit bounds how much of a body is read to reuse the connection;
	// a longer body closes the connection instead.
	drainLimit = 256 << 10
	// maxHeaderBytes bounds a response's status line and headers (net/http
	// allows 10 MiB per request in flight); more is a target failure.
	maxHeaderBytes = 64 << 10
)

// StatusError is a non-2xx response, wrapped in senders.Capacity or
// senders.Permanent when classify says so.
type StatusError struct {
	Method string
	URL    string // redacted (package redact)
	Status int
	// Body is the start of the response body (at most BodyInReason bytes).
	Body string
	// Location is the redirect target of a 3xx response.
	Location string
}

func (e *StatusError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "http: %s %s: status %d %s", e.Method, e.URL, e.Status, nethttp.StatusText(e.Status))
	if e.Location != "" {
		fmt.Fprintf(&b, " (redirect to %s not followed)", e.Location)
	}
	if e.Body != "" {
		fmt.Fprintf(&b, ": %s", e.Body)
	}
	return b.String()
}

// classify turns a response into a delivery outcome, and drains and closes
// its body so that the connection can be reused. It tells the target's
// failures (retried; DESIGN.md §11.3) from the message's:
//
//	2xx                          nil
//	429, 503                     senders.Capacity, with Retry-After (seconds or HTTP date)
//	400, 413, 415, 422           senders.Permanent: this message is refused
//	404, 410, 414 with a URL that
//	  has per-message placeholders senders.Permanent: this message's URL is wrong
//	431 with a URL or a header
//	  template with placeholders senders.Permanent: this message's request is too large
//	anything else (3xx, 401, 403, 404/410/414 on a fixed URL, 405, 407, 408,
//	  431 with a fixed URL and headers,
//	  other 4xx, 5xx)            transient: the target is down or misconfigured
func classify(resp *nethttp.Response, now time.Time, method string, u *url.URL, perMessageURL, perMessageHeaders bool) error {
	defer resp.Body.Close()
	code := resp.StatusCode
	se := &StatusError{Method: method, URL: redact.URL(u.String()), Status: code}
	if code < 200 {
		// Only 101 gets here (net/http skips the other 1xx): its body is
		// the raw connection, which no timeout covers. Closing it is all.
		return se
	}
	if code <= 299 {
		drain(resp.Body)
		return nil
	}
	head := make([]byte, BodyInReason)
	n, _ := io.ReadFull(resp.Body, head)
	se.Body = redact.Text(printable(head[:n])) // a target may echo the request URL
	drain(resp.Body)
	switch code {
	case nethttp.StatusTooManyRequests, nethttp.StatusServiceUnavailable:
		return senders.Capacity(se, RetryAfter(resp.Header.Get("Retry-After"), now))
	case nethttp.StatusBadRequest, nethttp.StatusRequestEntityTooLarge, nethttp.StatusUnsupportedMediaType,
		nethttp.StatusUnprocessableEntity:
		return senders.Permanent(se)
	case nethttp.StatusNotFound, nethttp.StatusGone, nethttp.StatusRequestURITooLong:
		if perMessageURL {
			return senders.Permanent(se)
		}
	case nethttp.StatusRequestHeaderFieldsTooLarge: // net/http's answer to a long request line too
		if perMessageURL || perMessageHeaders {
			return senders.Permanent(se)
		}
	}
	if code >= 300 && code <= 399 {
		se.Location = clip(redact.URL(printable([]byte(resp.Header.Get("Location")))))
	}
	return se
}

func drain(r io.Reader) { _, _ = io.Copy(io.Discard, io.LimitReader(r, drainLimit)) }

// clip cuts target-supplied text to BodyInReason bytes, on a rune boundary:
// an error's text is kept as a record's last error and dead-letter reason.
func clip(s string) string {
	if len(s) <= BodyInReason {
		return s
	}
	return strings.ToValidUTF8(s[:BodyInReason], "") + "…"
}

// clipped is an error whose text is clipped; errors.Is and As see through.
type clipped struct{ error }

func (c clipped) Error() string { return clip(c.error.Error()) }
func (c clipped) Unwrap() error { return c.error }

// printable returns b as text for an error message: invalid UTF-8 is
// replaced and control characters other than tab become spaces.
func printable(b []byte) string {
	b = bytes.ToValidUTF8(b, []byte("\uFFFD"))
	return strings.TrimSpace(strings.Map(func(r rune) rune {
		if r < 0x20 && r != '\t' || r == 0x7f {
			return ' '
		}
		return r
	}, string(b)))
}

// MaxRetryAfter caps a Retry-After hint: a target asking for more is still
// retried after a day.
const MaxRetryAfter = 24 * time.Hour

// RetryAfter parses a Retry-After header value: delay-seconds or an
// HTTP-date (RFC 9110 §10.2.3) relative to now. It returns 0 for an empty,
// malformed or past value, and at most MaxRetryAfter.
func RetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	var d time.Duration
	if secs, err := strconv.ParseInt(v, 10, 64); err == nil {
		d = MaxRetryAfter
		if secs < int64(MaxRetryAfter/time.Second) {
			d = time.Duration(secs) * time.Second
		}
	} else if t, err := nethttp.ParseTime(v); err == nil {
		d = min(t.Sub(now), MaxRetryAfter)
	}
	return max(d, 0)
}
