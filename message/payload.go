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
// it for another message.
type ParsedPayload struct {
	src  []byte
	done bool
	val  any
	err  error
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
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNotJSON, err)
	}
	if _, err := d.Token(); err != io.EOF {
		return nil, fmt.Errorf("%w: trailing data at offset %d", ErrNotJSON, d.InputOffset())
	}
	return numbers(v), nil
}

// numbers converts the json.Numbers of a decoded tree in place (a float out
// of range stays a json.Number).
func numbers(v any) any {
	switch t := v.(type) {
	case map[string]any:
		for k, e := range t {
			t[k] = numbers(e)
		}
	case []any:
		for i, e := range t {
			t[i] = numbers(e)
		}
	case json.Number:
		s := string(t)
		if !strings.ContainsAny(s, ".eE") {
			if n, err := strconv.ParseInt(s, 10, 64); err == nil && n == int64(int(n)) {
				return int(n)
			}
			return t
		}
		if f, err := strconv.ParseFloat(s, 64); err == nil {
			return f
		}
	}
	return v
}
