package message

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// TemplateError reports a template that does not parse: an unknown
// placeholder, an unbalanced brace or an empty path. Offset is the byte
// offset in Template where the problem starts.
type TemplateError struct {
	Template string
	Offset   int
	Msg      string
}

func (e *TemplateError) Error() string {
	return fmt.Sprintf("template %q at offset %d: %s", e.Template, e.Offset, e.Msg)
}

// FieldError reports a placeholder that a message cannot fill: a missing
// topic segment, header or payload field, a null payload field, or a payload
// that is not JSON. Callers treat it as a permanent failure of that message
// (wrap it with Permanent); the reason names the placeholder.
type FieldError struct {
	// Placeholder is the placeholder without braces, e.g. "payload.msg_id".
	Placeholder string
	// Reason says why it could not be filled.
	Reason string
}

func (e *FieldError) Error() string {
	return fmt.Sprintf("placeholder {%s}: %s", e.Placeholder, e.Reason)
}

type partKind uint8

const (
	partLiteral partKind = iota
	partTopic
	partTopicSegment
	partHeader
	partID
	partPayload
)

type part struct {
	kind partKind
	text string   // literal text, header name, or the placeholder (for errors)
	n    int      // topic segment
	path []string // payload path: object keys (a decimal key also indexes an array)
}

// Template is a parsed per-message template: literal text with placeholders
// filled from an envelope. A Template is immutable and safe for concurrent
// use.
//
// Placeholders:
//
//	{topic}          the whole topic
//	{topic.N}        the N-th topic segment, 0-based ("a/b/c": {topic.1} is "b")
//	{header.NAME}    the header NAME (exact name first, then case-insensitive)
//	{id}             the envelope ID
//	{payload.PATH}   a field of the JSON payload; PATH is dot-separated keys,
//	                 a numeric key indexes an array ({payload.sensors.0.id})
//
// A literal brace is written twice: "{{" renders "{" and "}}" renders "}".
type Template struct {
	src   string
	parts []part // adjacent literals merged
}

// ParseTemplate parses s. It returns a *TemplateError for an unknown
// placeholder, an unbalanced brace, or an empty name, index or path.
func ParseTemplate(s string) (*Template, error) {
	t := &Template{src: s}
	var lit strings.Builder
	flush := func() {
		if lit.Len() > 0 {
			t.parts = append(t.parts, part{kind: partLiteral, text: lit.String()})
			lit.Reset()
		}
	}
	fail := func(off int, format string, args ...any) (*Template, error) {
		return nil, &TemplateError{Template: s, Offset: off, Msg: fmt.Sprintf(format, args...)}
	}
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == '{' && i+1 < len(s) && s[i+1] == '{':
			lit.WriteByte('{')
			i += 2
		case c == '}' && i+1 < len(s) && s[i+1] == '}':
			lit.WriteByte('}')
			i += 2
		case c == '}':
			return fail(i, "unbalanced '}' (write '}}' for a literal brace)")
		case c == '{':
			end := strings.IndexAny(s[i+1:], "{}")
			if end < 0 || s[i+1+end] == '{' {
				return fail(i, "unclosed '{' (write '{{' for a literal brace)")
			}
			name := s[i+1 : i+1+end]
			p, msg := parsePlaceholder(name)
			if msg != "" {
				return fail(i, "%s", msg)
			}
			flush()
			t.parts = append(t.parts, p)
			i += end + 2
		default:
			lit.WriteByte(c)
			i++
		}
	}
	flush()
	return t, nil
}

func parsePlaceholder(name string) (part, string) {
	head, rest, dotted := strings.Cut(name, ".")
	switch {
	case name == "":
		return part{}, "empty placeholder {}"
	case name == "topic":
		return part{kind: partTopic, text: name}, ""
	case name == "id":
		return part{kind: partID, text: name}, ""
	case head == "topic" && dotted:
		n, err := strconv.ParseUint(rest, 10, 16)
		if err != nil || rest == "" || rest[0] == '+' {
			return part{}, fmt.Sprintf("{%s}: topic segment must be a number 0..65535", name)
		}
		return part{kind: partTopicSegment, text: name, n: int(n)}, ""
	case head == "header" && dotted:
		if rest == "" {
			return part{}, fmt.Sprintf("{%s}: empty header name", name)
		}
		return part{kind: partHeader, text: rest}, ""
	case head == "payload" && dotted:
		path := strings.Split(rest, ".")
		if slices.Contains(path, "") {
			return part{}, fmt.Sprintf("{%s}: empty path segment", name)
		}
		return part{kind: partPayload, text: name, path: path}, ""
	case head == "payload" || head == "header":
		return part{}, fmt.Sprintf("{%s}: empty path (write {%s.NAME})", name, head)
	}
	return part{}, fmt.Sprintf("unknown placeholder {%s} (known: {topic}, {topic.N}, {header.NAME}, {id}, {payload.PATH})", name)
}

// String returns the template as written.
func (t *Template) String() string { return t.src }

// IsLiteral reports whether the template has no placeholders.
func (t *Template) IsLiteral() bool {
	return len(t.parts) == 0 || len(t.parts) == 1 && t.parts[0].kind == partLiteral
}

// LiteralPrefix returns the literal text before the first placeholder
// (braces unescaped): the whole text of a literal template.
func (t *Template) LiteralPrefix() string {
	if len(t.parts) > 0 && t.parts[0].kind == partLiteral {
		return t.parts[0].text
	}
	return ""
}

// MaxTopicSegment returns the highest N of the template's {topic.N}
// placeholders, -1 when it has none.
func (t *Template) MaxTopicSegment() int {
	n := -1
	for _, p := range t.parts {
		if p.kind == partTopicSegment {
			n = max(n, p.n)
		}
	}
	return n
}

// HeaderNames returns the NAMEs of the template's {header.NAME}
// placeholders, in order.
func (t *Template) HeaderNames() []string {
	var names []string
	for _, p := range t.parts {
		if p.kind == partHeader {
			names = append(names, p.text)
		}
	}
	return names
}

// Split returns the parts of t in order, each a Template of its own (with
// no source text): literal text (IsLiteral; LiteralPrefix is the text) or
// one placeholder.
func (t *Template) Split() []*Template {
	out := make([]*Template, len(t.parts))
	for i := range t.parts {
		out[i] = &Template{parts: t.parts[i : i+1]}
	}
	return out
}

// Render fills the template from e. p caches e's decoded JSON payload, so
// that several templates (and expressions) decode it at most once; nil
// decodes afresh when the template has a {payload.PATH} placeholder. A
// placeholder that e cannot fill returns a *FieldError.
func (t *Template) Render(e *Envelope, p *ParsedPayload) (string, error) {
	if len(t.parts) == 1 {
		return t.renderPart(&t.parts[0], e, p)
	}
	var b strings.Builder
	for i := range t.parts {
		s, err := t.renderPart(&t.parts[i], e, p)
		if err != nil {
			return "", err
		}
		b.WriteString(s)
	}
	return b.String(), nil
}

func (t *Template) renderPart(pt *part, e *Envelope, p *ParsedPayload) (string, error) {
	switch pt.kind {
	case partLiteral:
		return pt.text, nil
	case partTopic:
		return e.Topic, nil
	case partID:
		return e.ID, nil
	case partTopicSegment:
		if s, ok := topicSegment(e.Topic, pt.n); ok {
			return s, nil
		}
		return "", &FieldError{Placeholder: pt.text, Reason: fmt.Sprintf("topic %q has %d segments", e.Topic, strings.Count(e.Topic, "/")+1)}
	case partHeader:
		if v, ok := lookupHeader(e.Headers, pt.text); ok {
			return v, nil
		}
		return "", &FieldError{Placeholder: "header." + pt.text, Reason: "no such header"}
	case partPayload:
		if p == nil {
			p = new(ParsedPayload)
		}
		root, err := p.Value(e.Payload)
		if err != nil {
			return "", &FieldError{Placeholder: pt.text, Reason: err.Error()} // says why (not UTF-8, too deep, ...)
		}
		v, reason := walkPath(root, pt.path)
		if reason != "" {
			return "", &FieldError{Placeholder: pt.text, Reason: reason}
		}
		return formatValue(v)
	}
	return "", &FieldError{Placeholder: pt.text, Reason: "unknown placeholder"}
}

// topicSegment returns the n-th '/'-separated segment of topic without
// allocating.
func topicSegment(topic string, n int) (string, bool) {
	for range n {
		_, rest, ok := strings.Cut(topic, "/")
		if !ok {
			return "", false
		}
		topic = rest
	}
	segment, _, _ := strings.Cut(topic, "/")
	return segment, true
}

func lookupHeader(h map[string]string, name string) (string, bool) {
	if v, ok := h[name]; ok {
		return v, true
	}
	for k, v := range h {
		if strings.EqualFold(k, name) {
			return v, true
		}
	}
	return "", false
}

func walkPath(v any, path []string) (any, string) {
	for i, key := range path {
		switch x := v.(type) {
		case map[string]any:
			next, ok := x[key]
			if !ok {
				return nil, fmt.Sprintf("field %q missing", strings.Join(path[:i+1], "."))
			}
			v = next
		case []any:
			n, err := strconv.ParseUint(key, 10, 31)
			if err != nil || n >= uint64(len(x)) {
				return nil, fmt.Sprintf("index %q out of range (array of %d)", strings.Join(path[:i+1], "."), len(x))
			}
			v = x[n]
		default:
			return nil, fmt.Sprintf("field %q missing (not an object or array)", strings.Join(path[:i+1], "."))
		}
	}
	if v == nil {
		return nil, fmt.Sprintf("field %q is null", strings.Join(path, "."))
	}
	return v, ""
}

// formatValue renders a decoded JSON value: strings raw, numbers in their
// shortest exact decimal form, booleans as true/false, objects and arrays as
// compact JSON.
func formatValue(v any) (string, error) {
	switch x := v.(type) {
	case string:
		return x, nil
	case int:
		return strconv.Itoa(x), nil
	case json.Number:
		return string(x), nil
	case float64:
		return FormatFloat(x), nil
	case bool:
		return strconv.FormatBool(x), nil
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return "", &FieldError{Placeholder: "payload", Reason: "value does not encode as JSON"}
	}
	return strings.TrimSuffix(buf.String(), "\n"), nil
}
