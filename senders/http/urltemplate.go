package http

import (
	"net/url"
	"strings"

	"github.com/gobridge/gobridge/message"
)

// urlTemplate is a url template whose placeholder values are escaped where
// they land, as RFC 6570 simple expansion does: a value in the path is one
// path segment (url.PathEscape: "a/b c" becomes "a%2Fb%20c"), a value in the
// query is one query component (url.QueryEscape). So a topic segment or a
// payload field can never add path segments, start a query or a fragment.
type urlTemplate struct {
	parts []urlPart
}

type urlPart struct {
	literal string
	value   *message.Template // nil for a literal
	query   bool              // the placeholder is after the first '?'
}

// perMessage reports whether the URL has per-message placeholders (a 404
// then says this message's URL is wrong, not that the target is).
func (u *urlTemplate) perMessage() bool {
	for _, p := range u.parts {
		if p.value != nil {
			return true
		}
	}
	return false
}

// parseURLTemplate parses s with the delivery template grammar and splits it
// into literals and single placeholders.
func parseURLTemplate(s string) (*urlTemplate, error) {
	if _, err := message.ParseTemplate(s); err != nil {
		return nil, err
	}
	t := &urlTemplate{}
	var lit strings.Builder
	inQuery := false
	for i := 0; i < len(s); {
		switch {
		case strings.HasPrefix(s[i:], "{{"):
			lit.WriteByte('{')
			i += 2
		case strings.HasPrefix(s[i:], "}}"):
			lit.WriteByte('}')
			i += 2
		case s[i] == '{':
			end := strings.IndexByte(s[i:], '}') // ParseTemplate accepted s: it exists
			if lit.Len() > 0 {
				t.parts = append(t.parts, urlPart{literal: lit.String()})
				inQuery = inQuery || strings.Contains(lit.String(), "?")
				lit.Reset()
			}
			v, err := message.ParseTemplate(s[i : i+end+1])
			if err != nil {
				return nil, err
			}
			t.parts = append(t.parts, urlPart{value: v, query: inQuery})
			i += end + 1
		default:
			lit.WriteByte(s[i])
			i++
		}
	}
	if lit.Len() > 0 {
		t.parts = append(t.parts, urlPart{literal: lit.String()})
	}
	return t, nil
}

// isLiteral reports whether the url has no placeholders.
func (t *urlTemplate) isLiteral() bool {
	for _, p := range t.parts {
		if p.value != nil {
			return false
		}
	}
	return true
}

// render fills the url from e, escaping each value; a placeholder e cannot
// fill returns the template's *message.FieldError.
func (t *urlTemplate) render(e *message.Envelope, p *message.ParsedPayload) (string, error) {
	var b strings.Builder
	for _, part := range t.parts {
		if part.value == nil {
			b.WriteString(part.literal)
			continue
		}
		v, err := part.value.RenderWith(e, p)
		if err != nil {
			return "", err
		}
		if part.query {
			b.WriteString(url.QueryEscape(v))
		} else {
			b.WriteString(url.PathEscape(v))
		}
	}
	return b.String(), nil
}
