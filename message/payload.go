package message

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"unicode/utf8"
)

// FormatFloat renders a JSON number without exponent notation in the common
// range (1e6 is "1000000", 0.5 is "0.5"); very large or very small
// magnitudes use the shortest exponent form.
func FormatFloat(f float64) string {
	if a := math.Abs(f); a == 0 || (a >= 1e-6 && a < 1e21) {
		return strconv.FormatFloat(f, 'f', -1, 64)
	}
	return strconv.FormatFloat(f, 'g', -1, 64)
}

// ParsedPayload decodes one envelope's JSON payload at most once and shares
// the result among templates and expressions. Numbers decode exactly: an
// integer that fits in int64 becomes an int, larger integers stay a
// json.Number (their exact text), and other numbers become float64.
//
// A ParsedPayload notices when it is asked about a different payload slice
// (a processor assigned a new payload) and decodes again. The zero value is
// ready to use; it is not safe for concurrent use. Call Reset before reusing
// it for another message: a reused ParsedPayload (e.g. from a sync.Pool)
// decodes with fewer allocations, as it keeps its buffers and interns object
// keys.
type ParsedPayload struct {
	src     []byte
	done    bool
	val     any
	err     error
	scratch jsonScratch
}

// ErrNotJSON is returned by ParsedPayload.Value for a payload that is not a
// single JSON value.
var ErrNotJSON = errors.New("payload is not JSON")

// Value returns payload decoded as JSON, or ErrNotJSON (with a nil value).
func (p *ParsedPayload) Value(payload []byte) (any, error) {
	if p.done && sameSlice(p.src, payload) {
		return p.val, p.err
	}
	p.src, p.done = payload, true
	p.val, p.err = decodeJSON(payload, &p.scratch)
	return p.val, p.err
}

// Reset forgets the decoded payload (keeping its scratch buffers).
func (p *ParsedPayload) Reset() {
	p.src, p.done, p.val, p.err = nil, false, nil, nil
	p.scratch.release()
}

func sameSlice(a, b []byte) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

// maxJSONDepth bounds nesting, as encoding/json does, so that a hostile
// payload cannot exhaust the stack.
const maxJSONDepth = 10000

// decodeJSON decodes b as exactly one JSON value (surrounding whitespace
// allowed). It accepts exactly what encoding/json accepts and returns the same
// tree as encoding/json with UseNumber, except that numbers are converted:
// an integer within int64 becomes an int, a larger one stays a json.Number
// (exact text; expr would compare a uint64 or a rounded float64 wrongly),
// and any other number becomes a float64 (a json.Number when out of range).
// It is a small hand-written decoder because this runs once per message:
// it allocates only the resulting values.
func decodeJSON(b []byte, scratch *jsonScratch) (any, error) {
	if scratch == nil {
		scratch = new(jsonScratch)
	}
	d := jsonDecoder{b: b, jsonScratch: scratch}
	d.skipSpace()
	v, err := d.value(0)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNotJSON, err)
	}
	d.skipSpace()
	if d.i != len(d.b) {
		return nil, fmt.Errorf("%w: trailing data at offset %d", ErrNotJSON, d.i)
	}
	return v, nil
}

type jsonDecoder struct {
	b []byte
	i int
	*jsonScratch
}

// jsonScratch holds the members of the objects and arrays being decoded, so
// that each map and slice is allocated once, at its final size. It is reused
// from message to message.
type jsonScratch struct {
	members []jsonMember
	elems   []any
	// keys interns object keys once the scratch is reused (after a Reset):
	// payloads of one route mostly share a schema, so after the first
	// message its keys cost no allocation. A one-shot decoding does not
	// pay for the map.
	keys   map[string]string
	reused bool
}

const (
	maxInternedKeys   = 512
	maxInternedKeyLen = 64
)

// key returns raw (an object key without escapes) as a string, interned.
func (s *jsonScratch) key(raw []byte) string {
	if k, ok := s.keys[string(raw)]; ok {
		return k
	}
	k := string(raw)
	if s.reused && len(k) <= maxInternedKeyLen && len(s.keys) < maxInternedKeys {
		if s.keys == nil {
			s.keys = make(map[string]string)
		}
		s.keys[k] = k
	}
	return k
}

type jsonMember struct {
	key string
	val any
}

// release drops the references the scratch buffers still hold, and the
// buffers themselves when a large payload grew them.
func (s *jsonScratch) release() {
	s.reused = true
	if cap(s.members) > 1024 || cap(s.elems) > 1024 {
		s.members, s.elems = nil, nil
		return
	}
	clear(s.members[:cap(s.members)])
	clear(s.elems[:cap(s.elems)])
	s.members, s.elems = s.members[:0], s.elems[:0]
}

type jsonSyntaxError struct {
	off int
	msg string
}

func (e *jsonSyntaxError) Error() string { return fmt.Sprintf("offset %d: %s", e.off, e.msg) }

func (d *jsonDecoder) fail(msg string) error { return &jsonSyntaxError{off: d.i, msg: msg} }

func (d *jsonDecoder) skipSpace() {
	for d.i < len(d.b) {
		switch d.b[d.i] {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return
		}
	}
}

// value decodes the value at d.i; whitespace before it is already skipped.
func (d *jsonDecoder) value(depth int) (any, error) {
	if d.i >= len(d.b) {
		return nil, d.fail("unexpected end of input")
	}
	switch c := d.b[d.i]; {
	case c == '{':
		if depth >= maxJSONDepth {
			return nil, d.fail("nested too deeply")
		}
		return d.object(depth + 1)
	case c == '[':
		if depth >= maxJSONDepth {
			return nil, d.fail("nested too deeply")
		}
		return d.array(depth + 1)
	case c == '"':
		return d.str(false)
	case c == '-' || (c >= '0' && c <= '9'):
		return d.number()
	case c == 't':
		return true, d.literal("true")
	case c == 'f':
		return false, d.literal("false")
	case c == 'n':
		return nil, d.literal("null")
	}
	return nil, d.fail("invalid character")
}

func (d *jsonDecoder) literal(word string) error {
	if len(d.b)-d.i < len(word) || string(d.b[d.i:d.i+len(word)]) != word {
		return d.fail("invalid literal")
	}
	d.i += len(word)
	return nil
}

func (d *jsonDecoder) object(depth int) (any, error) {
	d.i++ // '{'
	base := len(d.members)
	defer func() { d.members = d.members[:base] }()
	d.skipSpace()
	if d.i < len(d.b) && d.b[d.i] == '}' {
		d.i++
		return map[string]any{}, nil
	}
	for {
		if d.i >= len(d.b) || d.b[d.i] != '"' {
			return nil, d.fail("expected object key")
		}
		k, err := d.str(true)
		if err != nil {
			return nil, err
		}
		d.skipSpace()
		if d.i >= len(d.b) || d.b[d.i] != ':' {
			return nil, d.fail("expected ':'")
		}
		d.i++
		d.skipSpace()
		v, err := d.value(depth)
		if err != nil {
			return nil, err
		}
		d.members = append(d.members, jsonMember{k, v})
		d.skipSpace()
		if d.i >= len(d.b) {
			return nil, d.fail("unexpected end of object")
		}
		switch d.b[d.i] {
		case ',':
			d.i++
			d.skipSpace()
		case '}':
			d.i++
			m := make(map[string]any, len(d.members)-base)
			for _, kv := range d.members[base:] {
				m[kv.key] = kv.val
			}
			return m, nil
		default:
			return nil, d.fail("expected ',' or '}'")
		}
	}
}

func (d *jsonDecoder) array(depth int) (any, error) {
	d.i++ // '['
	base := len(d.elems)
	defer func() { d.elems = d.elems[:base] }()
	d.skipSpace()
	if d.i < len(d.b) && d.b[d.i] == ']' {
		d.i++
		return []any{}, nil
	}
	for {
		v, err := d.value(depth)
		if err != nil {
			return nil, err
		}
		d.elems = append(d.elems, v)
		d.skipSpace()
		if d.i >= len(d.b) {
			return nil, d.fail("unexpected end of array")
		}
		switch d.b[d.i] {
		case ',':
			d.i++
			d.skipSpace()
		case ']':
			d.i++
			return append([]any(nil), d.elems[base:]...), nil
		default:
			return nil, d.fail("expected ',' or ']'")
		}
	}
}

// str decodes the string starting at the opening quote at d.i (an object
// key when isKey). Strings
// without escapes are copied as they are; others (and invalid UTF-8, which
// becomes U+FFFD) go through encoding/json so that both agree exactly.
func (d *jsonDecoder) str(isKey bool) (string, error) {
	start := d.i
	d.i++
	simple := true
	for d.i < len(d.b) {
		c := d.b[d.i]
		switch {
		case c == '"':
			d.i++
			raw := d.b[start+1 : d.i-1]
			if simple && utf8.Valid(raw) {
				if isKey {
					return d.key(raw), nil
				}
				return string(raw), nil
			}
			var s string
			if err := json.Unmarshal(d.b[start:d.i], &s); err != nil {
				return "", &jsonSyntaxError{off: start, msg: "invalid string"}
			}
			return s, nil
		case c == '\\':
			simple = false
			d.i += 2 // skip the escaped byte; encoding/json validates the escape
		case c < 0x20:
			return "", d.fail("control character in string")
		default:
			d.i++
		}
	}
	return "", &jsonSyntaxError{off: start, msg: "unterminated string"}
}

// number scans a JSON number (RFC 8259 grammar) and converts it.
func (d *jsonDecoder) number() (any, error) {
	start := d.i
	if d.b[d.i] == '-' {
		d.i++
	}
	switch {
	case d.i < len(d.b) && d.b[d.i] == '0':
		d.i++
	case d.i < len(d.b) && d.b[d.i] >= '1' && d.b[d.i] <= '9':
		d.skipDigits()
	default:
		return nil, d.fail("invalid number")
	}
	integer := true
	if d.i < len(d.b) && d.b[d.i] == '.' {
		integer = false
		d.i++
		if !d.skipDigits() {
			return nil, d.fail("invalid number: digits expected after '.'")
		}
	}
	if d.i < len(d.b) && (d.b[d.i] == 'e' || d.b[d.i] == 'E') {
		integer = false
		d.i++
		if d.i < len(d.b) && (d.b[d.i] == '+' || d.b[d.i] == '-') {
			d.i++
		}
		if !d.skipDigits() {
			return nil, d.fail("invalid number: digits expected in exponent")
		}
	}
	text := d.b[start:d.i]
	if integer {
		if n, ok := parseInt(text); ok {
			return n, nil
		}
		return json.Number(text), nil
	}
	f, err := strconv.ParseFloat(string(text), 64)
	if err != nil {
		return json.Number(text), nil
	}
	return f, nil
}

func (d *jsonDecoder) skipDigits() bool {
	start := d.i
	for d.i < len(d.b) && d.b[d.i] >= '0' && d.b[d.i] <= '9' {
		d.i++
	}
	return d.i > start
}

// parseInt parses a JSON integer (grammar already checked) into an int,
// reporting false when it does not fit, without allocating an error.
func parseInt(text []byte) (int, bool) {
	neg := text[0] == '-'
	if neg {
		text = text[1:]
	}
	if len(text) > 19 {
		return 0, false
	}
	var u uint64
	for _, c := range text {
		u = u*10 + uint64(c-'0') // at most 19 digits: no uint64 overflow
	}
	switch {
	case !neg && u <= math.MaxInt:
		return int(u), true
	case neg && u <= -math.MinInt:
		return int(-u), true
	}
	return 0, false
}
