package message

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

// referenceDecode is what decodeJSON must agree with: encoding/json with
// UseNumber, then the documented number conversion and refusals (not
// UTF-8, deeper than MaxDepth, a lone surrogate). known is false when it
// cannot tell a lone surrogate from a U+FFFD the text spells itself.
func referenceDecode(b []byte) (v any, ok, known bool) {
	if !json.Valid(b) || !utf8.Valid(b) {
		return nil, false, true
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return nil, false, true
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, false, true
	}
	// The nesting depth, and the names of each open object, from the
	// tokens: a name is a string where an object expects one.
	type open struct {
		names    map[string]bool // nil for an array
		wantName bool
	}
	var stack []*open
	most, twice := 0, false
	for tok := json.NewDecoder(bytes.NewReader(b)); ; {
		t, err := tok.Token()
		if err != nil {
			break
		}
		var top *open
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		if name, ok := t.(string); ok && top != nil && top.names != nil && top.wantName {
			twice = twice || top.names[name]
			top.names[name], top.wantName = true, false
			continue
		}
		switch t {
		case json.Delim('['):
			stack = append(stack, &open{})
		case json.Delim('{'):
			stack = append(stack, &open{names: map[string]bool{}, wantName: true})
		case json.Delim(']'), json.Delim('}'):
			stack = stack[:len(stack)-1]
			if len(stack) > 0 {
				stack[len(stack)-1].wantName = true
			}
		default:
			if top != nil {
				top.wantName = true
			}
		}
		most = max(most, len(stack))
	}
	if most > MaxDepth || twice {
		return nil, false, true
	}
	if strings.Contains(fmt.Sprint(v), "\ufffd") { // encoding/json's stand-in for a lone surrogate
		spelled := bytes.Contains(b, []byte("\ufffd")) || bytes.Contains(bytes.ToLower(b), []byte(`\ufffd`))
		if !spelled {
			return nil, false, true
		}
		return nil, false, false
	}
	return referenceConvert(v), true, true
}

func referenceConvert(v any) any {
	switch x := v.(type) {
	case json.Number:
		s := string(x)
		if !strings.ContainsAny(s, ".eE") {
			if n, err := strconv.ParseInt(s, 10, 0); err == nil {
				return int(n)
			}
			return x
		}
		f, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return x
		}
		exact, ok := new(big.Rat).SetString(s)
		if !ok {
			// big.Rat refuses an exponent it cannot scale by (such as
			// 0e10000000000000000000). The number is then zero when its
			// digits are, and otherwise too large (ParseFloat failed
			// above) or too small for a float64 (ParseFloat gave 0).
			mant, _, _ := strings.Cut(strings.ToLower(s), "e")
			if strings.Trim(mant, "-0.") != "" {
				return x
			}
			return f
		}
		shortest, _ := new(big.Rat).SetString(strconv.FormatFloat(f, 'g', -1, 64))
		if exact.Cmp(shortest) != 0 {
			return x
		}
		return f
	case map[string]any:
		for k, e := range x {
			x[k] = referenceConvert(e)
		}
	case []any:
		for i, e := range x {
			x[i] = referenceConvert(e)
		}
	}
	return v
}

var jsonSeeds = []string{
	samplePayload, `{}`, `[]`, ` [ 1 , -0 , -0.0 , 1e3 , 1E+2 , 0.5e-3 ] `, `"a\"b\\c\u00e9\ud83d\ude00"`,
	`"\xff invalid utf8"`, `{"a":{"a":{"a":[[[null]]]}}}`, `{"a":1,"a":2}`, `{"a":{"b":1,"b":1}}`, `[{"a":1},{"a":2}]`, `{"a":1,"\u0061":2}`, `{"a" : {"a":[{"a":1}]}, "b":"a"}`, `9223372036854775807`,
	`9223372036854775808`, `-9223372036854775808`, `-9223372036854775809`, `1e400`, `123456789012345678`,
	`01`, `1.`, `.5`, `-`, `1e`, `+1`, `"abc`, `"a\x"`, "\"tab\there\"", `{"a" 1}`, `{"a":1,}`, `[1,]`,
	"\"\xff invalid utf8\"", `"\ud800"`, `"\ud83d\ude00\udc00"`, `"\\ud800"`, `"\ufffd"`, `[1.5, 12345678901234567890.5, 1.00000000000000000001e2]`,
	`tru`, `nul`, `true false`, ``, `   `, "\ufeff{}", `{"a":[1,2,{"b":"c"}]}x`, `"\`,
}

func TestDecodeJSON_AgreesWithEncodingJSON(t *testing.T) {
	t.Parallel()
	for _, s := range jsonSeeds {
		checkDecode(t, []byte(s))
	}
	deep := strings.Repeat("[", 10001) + strings.Repeat("]", 10001)
	if _, err := decodeJSON([]byte(deep)); !errors.Is(err, ErrNotJSON) {
		t.Errorf("10001 levels of nesting: err = %v, want ErrNotJSON", err)
	}
}

// Nesting is bounded: expr's toJSON indents, so its output (and CPU) grows
// with the square of the depth; 10,000 levels in 20 KB cost seconds.
func TestDecodeJSON_DepthLimit(t *testing.T) {
	t.Parallel()
	nest := func(n int) []byte {
		return []byte(`{"a":` + strings.Repeat("[", n-1) + strings.Repeat("]", n-1) + "}")
	}
	if _, err := decodeJSON(nest(MaxDepth)); err != nil {
		t.Errorf("%d levels: %v", MaxDepth, err)
	}
	if _, err := decodeJSON(nest(MaxDepth + 1)); !errors.Is(err, ErrNotJSON) {
		t.Errorf("%d levels: err = %v, want ErrNotJSON", MaxDepth+1, err)
	}
}

func checkDecode(t *testing.T, b []byte) {
	t.Helper()
	want, ok, known := referenceDecode(b)
	got, err := decodeJSON(b)
	if !known {
		return
	}
	if ok != (err == nil) {
		t.Fatalf("decodeJSON(%q) err = %v, encoding/json valid = %v", b, err, ok)
	}
	if err != nil {
		if !errors.Is(err, ErrNotJSON) {
			t.Fatalf("decodeJSON(%q) err = %v, want ErrNotJSON", b, err)
		}
		return
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("decodeJSON(%q) = %#v, want %#v", b, got, want)
	}
}

func FuzzDecodeJSON(f *testing.F) {
	for _, s := range jsonSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) { checkDecode(t, b) })
}

func TestFormatFloat(t *testing.T) {
	t.Parallel()
	for f, want := range map[float64]string{1e6: "1000000", 0.5: "0.5", -2.25: "-2.25", 0: "0", 1e21: "1e+21", 1e-7: "1e-07"} {
		if got := FormatFloat(f); got != want {
			t.Errorf("FormatFloat(%v) = %q, want %q", f, got, want)
		}
	}
}

func BenchmarkDecodeJSON(b *testing.B) {
	payload := []byte(samplePayload)
	b.Run("reused", func(b *testing.B) {
		b.SetBytes(int64(len(payload)))
		b.ReportAllocs()
		var p ParsedPayload
		for b.Loop() {
			p.Reset()
			if _, err := p.Value(payload); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("fresh", func(b *testing.B) {
		b.SetBytes(int64(len(payload)))
		b.ReportAllocs()
		for b.Loop() {
			var p ParsedPayload
			if _, err := p.Value(payload); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding_json", func(b *testing.B) { // the reference, for comparison
		b.SetBytes(int64(len(payload)))
		b.ReportAllocs()
		for b.Loop() {
			if _, ok, _ := referenceDecode(payload); !ok {
				b.Fatal("invalid")
			}
		}
	})
}
