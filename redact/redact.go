// Package redact removes credentials from URLs and from text that may hold
// URLs (error messages, log lines, dead-letter reasons), so that they never
// leave the process. It is a leaf package, used at every boundary where
// text goes out.
//
// Two things are redacted, and replaced by Mask:
//   - a URL's user-info ("tcp://user:pass@host" becomes "tcp://REDACTED@host";
//     a lone user name goes too, as it is often a token);
//   - the value of a query parameter whose name says it is a secret
//     ("?api_key=abc" becomes "?api_key=REDACTED"): see Secret.
//
// Redaction errs on the side of hiding: text that only looks like a
// credential is masked as well. Everything else is kept byte for byte.
package redact

import (
	"net/url"
	"strings"
	"unicode"
)

// Mask replaces every redacted value.
const Mask = "REDACTED"

// secretWords are the words of a query parameter name that make it secret
// (see Secret).
var secretWords = map[string]bool{
	"token": true, "key": true, "apikey": true, "secret": true, "password": true,
	"passwd": true, "pwd": true, "pass": true, "sig": true, "signature": true,
	"auth": true, "authorization": true, "code": true, "credential": true,
	"credentials": true, "accesstoken": true, "sessionid": true,
}

// Secret reports whether a query parameter called name holds a secret: the
// name or one of its words (split at every character that is not a letter
// or digit and at lower-to-upper case changes) is one of secretWords,
// compared case-insensitively. So api_key, access_token, sessionId,
// X-Amz-Signature and X-Amz-Security-Token are secret; page and topic are
// not.
func Secret(name string) bool {
	if u, err := url.QueryUnescape(name); err == nil {
		name = u
	}
	if secretWords[strings.ToLower(name)] {
		return true
	}
	start := 0
	rs := []rune(name)
	for i := 0; i <= len(rs); i++ {
		boundary := i == len(rs) || !isAlnum(rs[i]) ||
			(i > start && unicode.IsUpper(rs[i]) && unicode.IsLower(rs[i-1]))
		if !boundary {
			continue
		}
		if i > start && secretWords[strings.ToLower(string(rs[start:i]))] {
			return true
		}
		start = i
		if i < len(rs) && !isAlnum(rs[i]) {
			start = i + 1
		}
	}
	return false
}

func isAlnum(r rune) bool { return unicode.IsLetter(r) || unicode.IsDigit(r) }

// URL returns s, one URL (it need not parse), with its user-info and the
// values of its secret query parameters replaced by Mask.
func URL(s string) string {
	return redactURL(s, false)
}

// Text returns s with every URL in it ("scheme://...", up to white space
// or a quote) redacted as URL does, and the value of every secret query
// parameter ("?name=value" or "&name=value") masked, also in relative
// URLs such as a redirect's "/login?code=abc".
func Text(s string) string {
	if !strings.Contains(s, "://") && !strings.ContainsAny(s, "?&;") {
		return s
	}
	var b strings.Builder
	rest := s
	for {
		i := strings.Index(rest, "://")
		if i < 0 {
			b.WriteString(redactQuery(rest, true))
			return b.String()
		}
		start := i
		for start > 0 && isSchemeByte(rest[start-1]) {
			start--
		}
		end := i + 3
		for end < len(rest) && !isTextEnd(rest[end]) {
			end++
		}
		b.WriteString(redactQuery(rest[:start], true))
		b.WriteString(redactURL(rest[start:end], true))
		rest = rest[end:]
	}
}

// redactURL redacts the URL u; text says it was cut out of text.
func redactURL(u string, text bool) string {
	authStart := 0
	if i := strings.Index(u, "://"); i >= 0 {
		authStart = i + 3
	} else if strings.HasPrefix(u, "//") {
		authStart = 2
	}
	out := u
	if authStart > 0 {
		// The user-info ends at the last '@' before the query or fragment.
		// A '/' before that '@' ends the authority, unless a ':' comes
		// first: an unescaped '/' in a password ("user:p/ss@host") is
		// masked rather than shown.
		rest := u[authStart:]
		stop := strings.IndexAny(rest, "?#")
		if stop < 0 {
			stop = len(rest)
		}
		if at := strings.LastIndexByte(rest[:stop], '@'); at >= 0 {
			info := rest[:at]
			slash, colon := strings.IndexByte(info, '/'), strings.IndexByte(info, ':')
			if slash < 0 || (colon >= 0 && colon < slash) {
				out = u[:authStart] + Mask + rest[at:]
			}
		}
	}
	return redactQuery(out, text)
}

// redactQuery masks the values of secret parameters in "?name=value" and
// "&name=value" (and ";name=value") pairs of s. In text, trailing
// punctuation of a value (".,:;)]") is kept: it most likely ends the
// sentence, not the value.
func redactQuery(s string, text bool) string {
	if !strings.ContainsAny(s, "?&;") {
		return s
	}
	var b strings.Builder
	i := 0
	for i < len(s) {
		c := s[i]
		b.WriteByte(c)
		i++
		if c != '?' && c != '&' && c != ';' {
			continue
		}
		eq := i
		for eq < len(s) && s[eq] != '=' && !isParamEnd(s[eq]) {
			eq++
		}
		if eq >= len(s) || s[eq] != '=' || eq == i || !Secret(s[i:eq]) {
			continue
		}
		end := eq + 1
		for end < len(s) && !isParamEnd(s[end]) {
			end++
		}
		keep := end
		if text {
			for keep > eq+1 && strings.IndexByte(".,:;)]", s[keep-1]) >= 0 {
				keep--
			}
		}
		b.WriteString(s[i : eq+1])
		if keep > eq+1 {
			b.WriteString(Mask)
		}
		b.WriteString(s[keep:end])
		i = end
	}
	return b.String()
}

func isSchemeByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '+' || c == '-' || c == '.'
}

// isTextEnd reports whether c ends a URL inside text.
func isTextEnd(c byte) bool {
	return c <= ' ' || c == '"' || c == '\'' || c == '`' || c == '<' || c == '>' || c == 0x7f
}

// isParamEnd reports whether c ends a query parameter's name or value.
func isParamEnd(c byte) bool {
	return c == '&' || c == '#' || c == ';' || isTextEnd(c)
}
