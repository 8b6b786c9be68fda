package schema_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	jsv "github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"gopkg.in/yaml.v3"

	"github.com/gobridge/gobridge/routes"
	"github.com/gobridge/gobridge/schema"
)

var update = flag.Bool("update", false, "rewrite schema/gobridge.schema.json from the Go types")

// modeline is the first line of every blueprint, so that editors with the
// YAML language server complete and check it.
const modeline = "# yaml-language-server: $schema=../schema/gobridge.schema.json"

// TestSchema_UpToDate fails when the committed schema is not what the
// current Go config types generate.
func TestSchema_UpToDate(t *testing.T) {
	got, err := schema.Generate("..")
	if err != nil {
		t.Fatal(err)
	}
	if *update {
		if err := os.WriteFile("gobridge.schema.json", got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile("gobridge.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("schema/gobridge.schema.json is not what routes.Config generates (%s); regenerate it with:\n\n"+
			"\tgo test ./schema -run TestSchema_UpToDate -update\n\nand commit it", firstDiff(got, want))
	}
	if !bytes.Equal(schema.JSON(), want) {
		t.Fatal("schema.JSON() is not the committed file; rebuild")
	}
}

// TestSchema_WithoutComments checks that the comments only add
// descriptions: the schema's structure does not depend on finding the
// source.
func TestSchema_WithoutComments(t *testing.T) {
	bare, err := schema.Generate("")
	if err != nil {
		t.Fatal(err)
	}
	full, err := schema.Generate("..")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(full), `"description": "ID names this instance`) {
		t.Error("the generated schema has no description from routes.Bridge.ID's doc comment")
	}
	strip := func(b []byte) string {
		var v any
		if err := json.Unmarshal(b, &v); err != nil {
			t.Fatal(err)
		}
		var walk func(any) any
		walk = func(v any) any {
			switch v := v.(type) {
			case map[string]any:
				delete(v, "description")
				for k, e := range v {
					v[k] = walk(e)
				}
			case []any:
				for i, e := range v {
					v[i] = walk(e)
				}
			}
			return v
		}
		out, _ := json.Marshal(walk(v))
		return string(out)
	}
	if strip(bare) != strip(full) {
		t.Error("the schemas with and without comments differ in more than descriptions")
	}
}

// TestSchema_AcceptsValidConfigs validates every blueprint, and every
// config under testdata/config whose golden lists no error, against the
// committed schema.
func TestSchema_AcceptsValidConfigs(t *testing.T) {
	sch := compile(t)
	files := validConfigs(t)
	for _, f := range files {
		t.Run(f, func(t *testing.T) {
			if err := sch.Validate(instance(t, f)); err != nil {
				t.Fatalf("%s does not validate against the schema:\n%v", f, err)
			}
		})
	}
}

// TestSchema_RejectsMisspeltKeys adds a misspelt key to every mapping of
// every valid config, one at a time, and expects the schema to refuse each
// as an additional property.
func TestSchema_RejectsMisspeltKeys(t *testing.T) {
	sch := compile(t)
	n := 0
	for _, f := range validConfigs(t) {
		doc := instance(t, f)
		for _, at := range mappings(doc, reflect.TypeFor[routes.Config](), "") {
			n++
			bad := instance(t, f)
			m := lookup(bad, at)
			var key string
			for k := range m {
				key = k + "x" // "retries" -> "retriesx"
				break
			}
			m[key] = "x"
			var verr *jsv.ValidationError
			if err := sch.Validate(bad); !errors.As(err, &verr) || !hasKind[*kind.AdditionalProperties](verr) {
				t.Errorf("%s: key %q added at %q: schema error = %v, want an additional property", f, key, at, err)
			}
		}
	}
	if n < 50 {
		t.Errorf("only %d mappings tried", n)
	}
	// The loader's own unknown-key case fails the schema too.
	var verr *jsv.ValidationError
	if err := sch.Validate(instance(t, "testdata/config/unknown-key.yaml")); !errors.As(err, &verr) || !hasKind[*kind.AdditionalProperties](verr) {
		t.Errorf("testdata/config/unknown-key.yaml: schema error = %v, want an additional property", err)
	}
}

// TestSchema_EnvReferences checks that numbers, booleans, durations and
// enums may be written as ${VAR} strings, and that a duration without a
// unit or a number written as a word still fail.
func TestSchema_EnvReferences(t *testing.T) {
	sch := compile(t)
	base := func() map[string]any {
		return map[string]any{
			"version": "${CONFIG_VERSION:-1}",
			"bridge": map[string]any{"id": "${HOSTNAME}", "shutdown_timeout": "${STOP:-45s}",
				"log": map[string]any{"level": "${LOG_LEVEL:-info}"}},
			"receivers": []any{map[string]any{"id": "in", "type": "mqtt",
				"options": map[string]any{"clean_session": "${CLEAN:-false}", "keep_alive": "30s"},
				"topics":  []any{map[string]any{"topic": "a/#", "qos": "${QOS:-1}"}}}},
			"senders": []any{map[string]any{"id": "out", "type": "stdout"}},
			"routes": []any{map[string]any{"id": "r", "receiver": "in", "topic": "a/#", "sender": "out",
				"policy": map[string]any{"max_in_flight": "${INFLIGHT:-8}", "backoff": map[string]any{"multiplier": 1.5}}}},
		}
	}
	if err := sch.Validate(base()); err != nil {
		t.Fatalf("config with ${VAR} values: %v", err)
	}
	for name, mutate := range map[string]func(m map[string]any){
		"bare number duration":  func(m map[string]any) { m["bridge"].(map[string]any)["shutdown_timeout"] = 30 },
		"duration without unit": func(m map[string]any) { m["bridge"].(map[string]any)["shutdown_timeout"] = "30" },
		"number as a word": func(m map[string]any) {
			m["routes"].([]any)[0].(map[string]any)["policy"].(map[string]any)["max_in_flight"] = "eight"
		},
		"unknown enum value":   func(m map[string]any) { m["bridge"].(map[string]any)["log"].(map[string]any)["level"] = "verbose" },
		"missing required key": func(m map[string]any) { delete(m["senders"].([]any)[0].(map[string]any), "type") },
		"wrong version":        func(m map[string]any) { m["version"] = 2 },
	} {
		m := base()
		mutate(m)
		if err := sch.Validate(m); err == nil {
			t.Errorf("%s: the schema accepts it", name)
		}
	}
}

// TestBlueprints_ReferenceSchema checks every blueprint's first line.
func TestBlueprints_ReferenceSchema(t *testing.T) {
	files, err := filepath.Glob("../blueprints/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no blueprints: %v", err)
	}
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(fh)
		sc.Scan()
		if sc.Text() != modeline {
			t.Errorf("%s: first line is %q, want %q", f, sc.Text(), modeline)
		}
		fh.Close()
	}
}

func compile(t *testing.T) *jsv.Schema {
	t.Helper()
	doc, err := jsv.UnmarshalJSON(bytes.NewReader(schema.JSON()))
	if err != nil {
		t.Fatal(err)
	}
	c := jsv.NewCompiler()
	if err := c.AddResource("gobridge.schema.json", doc); err != nil {
		t.Fatal(err)
	}
	sch, err := c.Compile("gobridge.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	return sch
}

// validConfigs lists the blueprints and the testdata configs whose golden
// holds warnings only, relative to the repository root.
func validConfigs(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("../blueprints/*.yaml")
	if err != nil || len(files) < 4 {
		t.Fatalf("blueprints: %v, %d found", err, len(files))
	}
	goldens, err := filepath.Glob("../testdata/config/*.golden")
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range goldens {
		data, err := os.ReadFile(g)
		if err != nil {
			t.Fatal(err)
		}
		valid := true
		for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
			if line != "" && !strings.Contains(line, ": warning: ") {
				valid = false
			}
		}
		if valid {
			files = append(files, strings.TrimSuffix(g, ".golden")+".yaml")
		}
	}
	for i, f := range files {
		files[i] = strings.TrimPrefix(f, "../")
	}
	return files
}

// instance reads a YAML file of the repository as a JSON value.
func instance(t *testing.T, rel string) any {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", rel))
	if err != nil {
		t.Fatal(err)
	}
	var v any
	if err := yaml.Unmarshal(data, &v); err != nil {
		t.Fatalf("%s: %v", rel, err)
	}
	js, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("%s: %v", rel, err)
	}
	out, err := jsv.UnmarshalJSON(bytes.NewReader(js))
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// mappings lists the paths ("", "bridge", "routes.0.policy") of the
// non-empty mappings in v that decode into a struct of type t (Go maps such
// as headers take any key).
func mappings(v any, t reflect.Type, at string) []string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	var out []string
	switch v := v.(type) {
	case map[string]any:
		if t.Kind() != reflect.Struct {
			return nil
		}
		if len(v) > 0 {
			out = append(out, at)
		}
		for i := range t.NumField() {
			f := t.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			if e, ok := v[name]; ok && f.IsExported() {
				out = append(out, mappings(e, f.Type, strings.TrimPrefix(at+"."+name, "."))...)
			}
		}
	case []any:
		if t.Kind() != reflect.Slice {
			return nil
		}
		for i, e := range v {
			out = append(out, mappings(e, t.Elem(), strings.TrimPrefix(fmt.Sprintf("%s.%d", at, i), "."))...)
		}
	}
	return out
}

// lookup returns the mapping at path (as mappings writes it).
func lookup(v any, path string) map[string]any {
	if path != "" {
		for _, p := range strings.Split(path, ".") {
			switch c := v.(type) {
			case map[string]any:
				v = c[p]
			case []any:
				var i int
				fmt.Sscan(p, &i)
				v = c[i]
			}
		}
	}
	return v.(map[string]any)
}

// hasKind reports whether err or one of its causes is of kind K.
func hasKind[K any](err *jsv.ValidationError) bool {
	if _, ok := err.ErrorKind.(K); ok {
		return true
	}
	for _, c := range err.Causes {
		if hasKind[K](c) {
			return true
		}
	}
	return false
}

// firstDiff describes the first line where got and want differ.
func firstDiff(got, want []byte) string {
	g, w := strings.Split(string(got), "\n"), strings.Split(string(want), "\n")
	for i := range min(len(g), len(w)) {
		if g[i] != w[i] {
			return fmt.Sprintf("line %d: generated %q, committed %q", i+1, g[i], w[i])
		}
	}
	return fmt.Sprintf("generated %d lines, committed %d", len(g), len(w))
}
