package message

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// referenceDecode is what decodeJSON must agree with: encoding/json with
// UseNumber, then the documented number conversion.
func referenceDecode(b []byte) (any, bool) {
	if !json.Valid(b) {
		return nil, false
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, false
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, false
	}
	return referenceConvert(v), true
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
		if f, err := strconv.ParseFloat(s, 64); err == nil {
			return f
		}
		return x
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
	`"\xff invalid utf8"`, `{"a":{"a":{"a":[[[null]]]}}}`, `{"a":1,"a":2}`, `9223372036854775807`,
	`9223372036854775808`, `-9223372036854775808`, `-9223372036854775809`, `1e400`, `123456789012345678`,
	`01`, `1.`, `.5`, `-`, `1e`, `+1`, `"abc`, `"a\x"`, "\"tab\there\"", `{"a" 1}`, `{"a":1,}`, `[1,]`,
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

func checkDecode(t *testing.T, b []byte) {
	t.Helper()
	want, ok := referenceDecode(b)
	got, err := decodeJSON(b)
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
			if _, ok := referenceDecode(payload); !ok {
				b.Fatal("invalid")
			}
		}
	})
}
