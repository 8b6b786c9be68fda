package message

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
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
// integer that fits in int64 becomes an int, other numbers a float64 when
// it holds them (the shortest form of the float64 is the number written),
// and the rest stay a json.Number (their exact text).
//
// A ParsedPayload notices when it is asked about a different payload slice
// (a processor assigned a new payload) and decodes again. The zero value is
// ready to use; it is not safe for concurrent use. Call Reset before reusing
// it for another message.
type ParsedPayload struct {
	src  []byte
	done bool
	val  any
	err  error
}

// ErrNotJSON is returned by ParsedPayload.Value for a payload that is not a
// single JSON value, is not UTF-8, has a string with a lone UTF-16
// surrogate escape (encoding/json would turn these into U+FFFD, so that
// distinct strings render the same key), has an object with a name twice
// (parsers disagree on which value counts, so a filter could pass what the
// target reads otherwise), or nests arrays and objects deeper than MaxDepth.
var ErrNotJSON = errors.New("payload is not JSON")

// MaxDepth is the deepest nesting of arrays and objects a JSON payload may
// have. It bounds the work a payload can cause: expr's toJSON indents, so
// its output grows with the square of the depth.
const MaxDepth = 64

// Value returns payload decoded as JSON, or ErrNotJSON (with a nil value).
func (p *ParsedPayload) Value(payload []byte) (any, error) {
	if p.done && sameSlice(p.src, payload) {
		return p.val, p.err
	}
	p.src, p.done = payload, true
	p.val, p.err = decodeJSON(payload)
	return p.val, p.err
}

// Reset forgets the decoded payload.
func (p *ParsedPayload) Reset() { *p = ParsedPayload{} }

func sameSlice(a, b []byte) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

// decodeJSON decodes b as exactly one JSON value (surrounding whitespace
// allowed) and converts its numbers as ParsedPayload says: expr would
// compare a uint64 or a rounded float64 wrongly.
func decodeJSON(b []byte) (any, error) {
	if !utf8.Valid(b) {
		return nil, fmt.Errorf("%w: not valid UTF-8", ErrNotJSON)
	}
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNotJSON, err)
	}
	if _, err := d.Token(); err != io.EOF {
		return nil, fmt.Errorf("%w: trailing data at offset %d", ErrNotJSON, d.InputOffset())
	}
	names, err := checkText(b)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNotJSON, err)
	}
	members := 0
	v = numbers(v, &members)
	if members != names {
		return nil, fmt.Errorf("%w: an object has a name twice", ErrNotJSON)
	}
	return v, nil
}

// checkText checks what encoding/json accepts but a payload may not have:
// nesting deeper than MaxDepth and lone surrogate escapes. It returns the
// number of object member names in b (a string followed by ':'). b is valid
// JSON, so every backslash is in a string and every escape is complete.
func checkText(b []byte) (names int, err error) {
	depth, inString := 0, false
	for i := 0; i < len(b); i++ {
		switch c := b[i]; {
		case inString && c == '\\' && b[i+1] == 'u':
			r, _ := strconv.ParseUint(string(b[i+2:i+6]), 16, 16)
			i += 5
			if r >= 0xdc00 && r <= 0xdfff {
				return 0, fmt.Errorf("lone surrogate \\u%04x at offset %d", r, i-5)
			}
			if r >= 0xd800 && r <= 0xdbff {
				lo := uint64(0)
				if i+6 < len(b) && b[i+1] == '\\' && b[i+2] == 'u' {
					lo, _ = strconv.ParseUint(string(b[i+3:i+7]), 16, 16)
				}
				if lo < 0xdc00 || lo > 0xdfff {
					return 0, fmt.Errorf("lone surrogate \\u%04x at offset %d", r, i-5)
				}
				i += 6
			}
		case inString && c == '\\':
			i++
		case c == '"':
			if inString = !inString; !inString {
				if rest := bytes.TrimLeft(b[i+1:], " \t\r\n"); len(rest) > 0 && rest[0] == ':' {
					names++
				}
			}
		case !inString && (c == '[' || c == '{'):
			if depth++; depth > MaxDepth {
				return 0, fmt.Errorf("nested deeper than %d at offset %d", MaxDepth, i)
			}
		case !inString && (c == ']' || c == '}'):
			depth--
		}
	}
	return names, nil
}

// numbers converts the json.Numbers of a decoded tree in place (a float out
// of range stays a json.Number), adding the objects' members to members.
func numbers(v any, members *int) any {
	switch t := v.(type) {
	case map[string]any:
		*members += len(t)
		for k, e := range t {
			t[k] = numbers(e, members)
		}
	case []any:
		for i, e := range t {
			t[i] = numbers(e, members)
		}
	case json.Number:
		s := string(t)
		if !strings.ContainsAny(s, ".eE") {
			if n, err := strconv.ParseInt(s, 10, 64); err == nil && n == int64(int(n)) {
				return int(n)
			}
			return t
		}
		if f, err := strconv.ParseFloat(s, 64); err == nil && holds(s, f) {
			return f
		}
	}
	return v
}

// holds reports whether f, in its shortest form, is the number s: false
// when s has more significant digits than a float64 keeps, or is below its
// range (ParseFloat rounds 1e-400 to 0 and 3e-324 to 5e-324 without an
// error): a key rendered from it would merge distinct numbers.
func holds(s string, f float64) bool {
	n := 0 // digits from the first non-zero one: at least the significant ones
	for i := 0; i < len(s) && s[i] != 'e' && s[i] != 'E'; i++ {
		if c := s[i]; c >= '1' && c <= '9' || c == '0' && n > 0 {
			n++
		}
	}
	// Every decimal of 15 digits has its own normal float64; subnormals
	// keep fewer digits.
	if n == 0 || n <= 15 && math.Abs(f) >= 0x1p-1022 {
		return true
	}
	d, exp := decimal(s)
	fd, fexp := decimal(strconv.FormatFloat(f, 'e', -1, 64))
	return d == fd && exp == fexp
}

// decimal returns the significant digits of the JSON number s and the
// position of the decimal point relative to them.
func decimal(s string) (string, int) {
	mant, e, _ := strings.Cut(strings.ToLower(strings.TrimPrefix(s, "-")), "e")
	exp, _ := strconv.Atoi(e)
	whole, frac, _ := strings.Cut(mant, ".")
	d := whole + frac
	exp += len(whole)
	trimmed := strings.TrimLeft(d, "0")
	exp -= len(d) - len(trimmed)
	return strings.TrimRight(trimmed, "0"), exp
}
