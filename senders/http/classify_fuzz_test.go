package http

import (
	"testing"
	"time"
)

// FuzzRetryAfter checks that any header value parses to a delay in
// [0, MaxRetryAfter] without panicking.
func FuzzRetryAfter(f *testing.F) {
	for _, s := range []string{"", "30", "-1", "Wed, 21 Oct 2015 07:28:00 GMT", "Fri, 31 Dec 9999 23:59:59 GMT", "9999999999999999999999", "1e3"} {
		f.Add(s)
	}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, v string) {
		if d := RetryAfter(v, now); d < 0 || d > MaxRetryAfter {
			t.Fatalf("RetryAfter(%q) = %v", v, d)
		}
	})
}
