package redact_test

import (
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/gobridge/gobridge/redact"
)

func TestURL(t *testing.T) {
	for in, want := range map[string]string{
		"tcp://bridge:s3cret@broker:1883":                           "tcp://REDACTED@broker:1883",
		"https://ghp_abc123@github.com/x":                           "https://REDACTED@github.com/x",
		"tcp://bridge:p/ss@broker:1883":                             "tcp://REDACTED@broker:1883",
		"tcp://bridge:p@ss@broker:1883/a":                           "tcp://REDACTED@broker:1883/a",
		"https://erp/x?api_key=K1&page=2":                           "https://erp/x?api_key=REDACTED&page=2",
		"https://erp/x?page=2&ApiKey=K1#frag":                       "https://erp/x?page=2&ApiKey=REDACTED#frag",
		"https://s3/b/o?X-Amz-Signature=ab&X-Amz-Credential=AK%2F1": "https://s3/b/o?X-Amz-Signature=REDACTED&X-Amz-Credential=REDACTED",
		"https://s3/b/o?X-Amz-Security-Token=T&X-Amz-Date=2026":     "https://s3/b/o?X-Amz-Security-Token=REDACTED&X-Amz-Date=2026",
		"https://h/?access_token=a&sessionToken=b&sig=c&code=d":     "https://h/?access_token=REDACTED&sessionToken=REDACTED&sig=REDACTED&code=REDACTED",
		"https://h/?TOKEN=a&Password=b&passwd=c&secret=d&auth=e":    "https://h/?TOKEN=REDACTED&Password=REDACTED&passwd=REDACTED&secret=REDACTED&auth=REDACTED",
		"https://h/?api%5Fkey=a":                                    "https://h/?api%5Fkey=REDACTED",
		"https://h/?token=":                                         "https://h/?token=",
		"https://npm/@scope/pkg?monkey=1&keyword=2&topic=3":         "https://npm/@scope/pkg?monkey=1&keyword=2&topic=3",
		"http://erp.example.com/ingest/line-7":                      "http://erp.example.com/ingest/line-7",
		"http://u:p@h/{topic}?token={payload.x}":                    "http://REDACTED@h/{topic}?token=REDACTED",
		"":                                                          "",
	} {
		if got := redact.URL(in); got != want {
			t.Errorf("URL(%q)\n = %q\nwant %q", in, got, want)
		}
	}
}

func TestText(t *testing.T) {
	for in, want := range map[string]string{
		`connect to tcp://bridge:s3cret@broker:1883: EOF`:                   `connect to tcp://REDACTED@broker:1883: EOF`,
		`Post "https://erp/x?api_key=K1&n=1": dial tcp: connection refused`: `Post "https://erp/x?api_key=REDACTED&n=1": dial tcp: connection refused`,
		`status 302 (redirect to /login?code=abc. not followed)`:            `status 302 (redirect to /login?code=REDACTED. not followed)`,
		`brokers [tcp://a:b@h1:1883 ssl://c:d@h2:8883]`:                     `brokers [tcp://REDACTED@h1:1883 ssl://REDACTED@h2:8883]`,
		`url https://h/p?token=abc: status 500`:                             `url https://h/p?token=REDACTED: status 500`,
		`nothing to see here: 3 & 4? yes`:                                   `nothing to see here: 3 & 4? yes`,
		`field "a" must be an object`:                                       `field "a" must be an object`,
	} {
		if got := redact.Text(in); got != want {
			t.Errorf("Text(%q)\n = %q\nwant %q", in, got, want)
		}
	}
}

// TestText_GoURLError feeds the error text Go's HTTP client really
// produces: *url.Error embeds the whole request URL.
func TestText_GoURLError(t *testing.T) {
	const key = "K-9f8e7d6c"
	_, err := http.Get("http://bridge:pw-5a4b@127.0.0.1:1/x?apikey=" + key)
	var ue *url.Error
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), key) {
		t.Fatalf("expected a *url.Error naming the key, got %v", err)
	}
	got := redact.Text(err.Error())
	if strings.Contains(got, key) || strings.Contains(got, "pw-5a4b") || !strings.Contains(got, "127.0.0.1:1/x?apikey=REDACTED") {
		t.Fatalf("redacted: %s", got)
	}
}

func TestSecret(t *testing.T) {
	for _, name := range []string{"token", "key", "api_key", "apikey", "API-KEY", "access_token", "secret", "client_secret",
		"password", "passwd", "sig", "signature", "auth", "code", "X-Amz-Signature", "X-Amz-Credential", "X-Amz-Security-Token",
		"sessionToken", "refresh_token", "x.api.key"} {
		if !redact.Secret(name) {
			t.Errorf("Secret(%q) = false", name)
		}
	}
	for _, name := range []string{"page", "topic", "monkey", "keyword", "author", "codec", "X-Amz-Date", "limit", ""} {
		if redact.Secret(name) {
			t.Errorf("Secret(%q) = true", name)
		}
	}
}

// FuzzRedact builds URLs around fuzzed credentials and checks the exact
// redaction, alone (URL) and inside an error message (Text); and that
// redacting twice changes nothing, whatever the text.
func FuzzRedact(f *testing.F) {
	f.Add("tcp", "user", "p@ss/w:rd", "broker:1883", "/a/b", "api_key", "K-1&x.", "plain text")
	f.Add("https", "", "", "erp", "/x", "X-Amz-Signature", "abc", "Post \"x\": y")
	f.Add("ws", "tok", "", "h", "", "token", "v?w", "a?token=zzzz&b")
	f.Fuzz(func(t *testing.T, scheme, user, pass, host, path, param, value, text string) {
		for _, s := range []string{text, scheme + "://" + host + path, value} {
			once := redact.Text(s)
			if twice := redact.Text(once); twice != once {
				t.Fatalf("Text not idempotent on %q: %q then %q", s, once, twice)
			}
			if u := redact.URL(s); redact.URL(u) != u {
				t.Fatalf("URL not idempotent on %q", s)
			}
		}
		if !validScheme(scheme) || !plain(host, "@/?#:;&%") || !plain(path, "@?#;&%") || param == "page" || !redact.Secret(param) {
			return
		}
		if pass != "" && user == "" {
			user = "u"
		}
		build := func(info *url.Userinfo, v string) string {
			u := url.URL{Scheme: scheme, Host: host, Path: path, User: info,
				RawQuery: url.Values{"page": {"2"}, param: {v}}.Encode()}
			return u.String()
		}
		var info, masked *url.Userinfo
		switch {
		case pass != "":
			info, masked = url.UserPassword(user, pass), url.User(redact.Mask)
		case user != "":
			info, masked = url.User(user), url.User(redact.Mask)
		}
		raw := build(info, value)
		escaped := url.QueryEscape(value)
		want := build(masked, strings.Repeat(redact.Mask, min(len(escaped), 1)))
		if got := redact.URL(raw); got != want {
			t.Fatalf("URL(%q)\n = %q\nwant %q", raw, got, want)
		}
		// In text, dots that end the value stay: they may end a sentence.
		dots := len(escaped) - len(strings.TrimRight(escaped, "."))
		wantText := build(masked, strings.Repeat(redact.Mask, min(len(escaped)-dots, 1))+strings.Repeat(".", dots))
		if got := redact.Text("error: " + raw + ": refused"); got != "error: "+wantText+": refused" {
			t.Fatalf("Text of %q\n = %q\nwant %q", raw, got, "error: "+wantText+": refused")
		}
	})
}

func validScheme(s string) bool {
	if s == "" || !(s[0] >= 'a' && s[0] <= 'z') {
		return false
	}
	for i := range len(s) {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '+' || c == '-' || c == '.') {
			return false
		}
	}
	return true
}

// plain reports whether s is printable ASCII without the given bytes,
// white space or quotes.
func plain(s, bad string) bool {
	for _, r := range s {
		if r <= ' ' || r > 0x7e || r == '"' || r == '\'' || r == '`' || r == '<' || r == '>' || strings.ContainsRune(bad, r) {
			return false
		}
	}
	return true
}

// BenchmarkText measures the cost the journal and /readyz pay per error:
// a send error with a URL, and one without.
func BenchmarkText(b *testing.B) {
	for name, s := range map[string]string{
		"url":   `permanent: http: POST https://erp.example/in/line-7?api_key=K1&n=2: status 400 Bad Request: {"error":"bad field"}`,
		"plain": `placeholder {payload.msg_id}: field "msg_id" missing`,
	} {
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				_ = redact.Text(s)
			}
		})
	}
}
