package http

import (
	"cmp"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/gobridge/gobridge/message"
)

// urlTemplate is a url template whose placeholder values are escaped where
// they land, as RFC 6570 simple expansion does: a value in the path is one
// path segment (url.PathEscape: "a/b c" becomes "a%2Fb%20c"), a value in the
// query is one query component (url.QueryEscape). So a topic segment or a
// payload field can never add path segments, start a query or a fragment.
// The scheme and host are literal (placeholders there are refused when the
// template is parsed), and a rendered path with a "." or ".." segment is
// refused, so a message can never choose another target or walk the
// target's paths.
type urlTemplate struct {
	parts        []urlPart
	scheme, host string // every rendered URL must keep them
}

type urlPart struct {
	literal string
	value   *message.Template // nil for a literal
	query   bool              // the placeholder is after the first '?' or '#'
	// fragment: the placeholder is after the first '#' (never sent).
	fragment bool
}

// perMessage reports whether the URL has per-message placeholders (it is
// then rendered for each message).
func (t *urlTemplate) perMessage() bool { return len(t.parts) > 1 || t.parts[0].value != nil }

// sentPerMessage reports whether a placeholder lands in what is sent (the
// path or query, not the fragment): a 404 then says this message's URL is
// wrong.
func (t *urlTemplate) sentPerMessage() bool {
	for _, p := range t.parts {
		if p.value != nil && !p.fragment {
			return true
		}
	}
	return false
}

// errURLTarget marks a rendered URL that would change the target: a dot
// segment in the path, or another scheme or host.
var errURLTarget = errors.New("rendered url leaves its target")

// parseURLTemplate parses s with the delivery template grammar. The scheme
// and host must come before the first placeholder, ended by '/', '?' or '#'.
func parseURLTemplate(s string) (*urlTemplate, error) {
	whole, err := message.ParseTemplate(s)
	if err != nil {
		return nil, err
	}
	origin, ok := urlOrigin(whole.LiteralPrefix(), whole.IsLiteral())
	if !ok {
		return nil, fmt.Errorf("the scheme and host must be literal text followed by '/', '?' or '#', not come from a placeholder")
	}
	o, err := parseURL(origin)
	if err != nil {
		return nil, err
	}
	t := &urlTemplate{scheme: o.Scheme, host: o.Host}
	inQuery, inFragment := false, false
	for _, part := range whole.Split() {
		if !part.IsLiteral() {
			t.parts = append(t.parts, urlPart{value: part, query: inQuery, fragment: inFragment})
			continue
		}
		inFragment = inFragment || strings.Contains(part.LiteralPrefix(), "#")
		// In the path, bytes a URL path cannot hold raw (a space, '{') are
		// percent-encoded, as Go would send them: otherwise url.Parse would
		// drop the raw path and decode every value's %2F into a separator.
		// In the query, a raw space would end the request line: the target
		// would answer 400 to every message.
		l := part.LiteralPrefix()
		if !inQuery {
			end := strings.IndexAny(l, "?#")
			if end < 0 {
				end = len(l)
			}
			inQuery = end < len(l)
			l = escapePathLiteral(l[:end]) + strings.ReplaceAll(l[end:], " ", "%20")
		} else {
			l = strings.ReplaceAll(l, " ", "%20")
		}
		t.parts = append(t.parts, urlPart{literal: l})
	}
	// A probe with plain values must parse: a malformed literal ("%zz")
	// would otherwise fail every message.
	var probe strings.Builder
	for _, p := range t.parts {
		probe.WriteString(cmp.Or(p.literal, "x"))
	}
	if _, err := parseURL(probe.String()); err != nil {
		return nil, err
	}
	return t, nil
}

// escapePathLiteral percent-encodes the bytes of a url's literal path text
// that a raw path cannot hold (RFC 3986 pchar, plus '/', '[', ']' and an
// existing '%' escape).
func escapePathLiteral(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("-._~!$&'()*+,;=:@[]%/", c) >= 0 {
			b.WriteByte(c)
			continue
		}
		fmt.Fprintf(&b, "%%%02X", c)
	}
	return b.String()
}

// urlOrigin returns "scheme://host" of a url template whose literal prefix
// is prefix; ok is false when a placeholder comes before the host ends.
func urlOrigin(prefix string, literal bool) (string, bool) {
	i := strings.Index(prefix, "://")
	if i < 0 {
		return "", false
	}
	if end := strings.IndexAny(prefix[i+3:], "/?#"); end >= 0 {
		return prefix[:i+3+end], true
	}
	return prefix, literal
}

// render fills the url from e, escaping each value, and returns it parsed.
// A placeholder e cannot fill returns the template's *message.FieldError; a
// url that would leave its target returns errURLTarget.
func (t *urlTemplate) render(e *message.Envelope, p *message.ParsedPayload) (*url.URL, error) {
	var b strings.Builder
	for _, part := range t.parts {
		if part.value == nil {
			b.WriteString(part.literal)
			continue
		}
		v, err := part.value.Render(e, p)
		if err != nil {
			return nil, err
		}
		if part.query {
			b.WriteString(url.QueryEscape(v))
		} else {
			b.WriteString(url.PathEscape(v))
		}
	}
	u, err := parseURL(b.String())
	if err != nil {
		return nil, err
	}
	if u.Scheme != t.scheme || !strings.EqualFold(u.Host, t.host) {
		return nil, fmt.Errorf("%w: %s://%s is not %s://%s", errURLTarget, u.Scheme, u.Host, t.scheme, t.host)
	}
	if seg, ok := dotSegment(u.EscapedPath()); ok {
		return nil, fmt.Errorf("%w: path segment %q would walk the target's paths", errURLTarget, seg)
	}
	return u, nil
}

// dotSegment returns the first segment of an escaped path that is "." or
// ".." once unescaped ("%2e%2E" too).
func dotSegment(path string) (string, bool) {
	for _, seg := range strings.Split(path, "/") {
		if d, err := url.PathUnescape(seg); err == nil && (d == "." || d == "..") {
			return seg, true
		}
	}
	return "", false
}
