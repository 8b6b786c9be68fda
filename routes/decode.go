package routes

import (
	"cmp"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

var (
	durationType = reflect.TypeFor[Duration]()
	secretType   = reflect.TypeFor[Secret]()
)

// walker checks a YAML node tree against the Go schema before decoding:
// unknown and duplicate keys, wrong node kinds and scalar types, durations
// and ${VAR} expansion. It records the position of every field path and
// removes the offending key/value pairs, so that the following node.Decode
// cannot fail and every problem is reported, not only the first.
type walker struct {
	src    source
	lookup func(string) (string, bool)
	probs  Problems
	// tag is the tag of the field being walked (a map's or list's elements
	// take the field's): template:"true" escapes its ${VAR} values to stay
	// literal text, and zero says what a 0 written there means.
	tag reflect.StructTag
}

func (w *walker) errorf(n *yaml.Node, path, rule, format string, args ...any) {
	w.probs = append(w.probs, Problem{File: w.src.file, Line: n.Line, Column: n.Column,
		Rule: rule, Severity: SeverityError, Message: fmt.Sprintf(format, args...), path: path})
	if path != "" {
		w.src.broken[path] = true
	}
}

// display names a path in messages; the root is "config".
func display(path string) string {
	if path == "" {
		return "config"
	}
	return path
}

// walk checks n against t at path. It returns false when n must be removed
// (or replaced) because it cannot be decoded into t.
func (w *walker) walk(n *yaml.Node, t reflect.Type, path string) bool {
	w.src.index[path] = pos{n.Line, n.Column}
	if n.Kind == yaml.AliasNode {
		w.errorf(n, path, "yaml-alias", "%s: YAML aliases (*name) are not supported; write the value out", display(path))
		return false
	}
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" && !strings.Contains(n.Value, "${") {
		return true // zero value; defaults and "required" rules take over
	}
	n.Anchor = "" // anchors are harmless without aliases
	switch t.Kind() {
	case reflect.Pointer:
		return w.walk(n, t.Elem(), path)
	case reflect.Struct, reflect.Map:
		return w.mapping(n, t, path)
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			w.errorf(n, path, "wrong-type", "%s: expected a list, got %s", path, kindName(n))
			return false
		}
		for i, e := range n.Content {
			if !w.walk(e, t.Elem(), fmt.Sprintf("%s[%d]", path, i)) {
				// keep indices stable: decode a zero value in its place
				n.Content[i] = &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null", Line: e.Line, Column: e.Column}
			}
		}
		return true
	}
	return w.scalar(n, t, path)
}

// mapping checks the mapping node of a struct (every key must name a
// field) or of a map (keys are strings).
func (w *walker) mapping(n *yaml.Node, t reflect.Type, path string) bool {
	if n.Kind != yaml.MappingNode {
		w.errorf(n, path, "wrong-type", "%s: expected a mapping, got %s", display(path), kindName(n))
		return false
	}
	var fields map[string]reflect.StructField
	if t.Kind() == reflect.Struct {
		fields = yamlFields(t)
	}
	var kept []*yaml.Node
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			w.errorf(k, path, "wrong-type", "%s: keys must be strings", display(path))
			continue
		}
		p := joinPath(path, k.Value)
		var elem reflect.Type
		tag := w.tag // a map's values take the map's tag
		if fields == nil {
			elem = t.Elem()
		} else if f, ok := fields[k.Value]; ok {
			elem, tag = f.Type, f.Tag
		} else {
			w.errorf(k, "", "unknown-key", "%s: unknown key %q%s", display(path), k.Value, suggest(k.Value, fields))
			continue
		}
		if line, dup := seen[k.Value]; dup {
			w.errorf(k, p, "duplicate-key", "%s: key %q already defined at line %d", display(path), k.Value, line)
			continue
		}
		seen[k.Value] = k.Line
		k.Tag, k.Style = "!!str", yaml.DoubleQuotedStyle
		outer := w.tag
		w.tag = tag
		ok := w.walk(v, elem, p)
		w.tag = outer
		if ok {
			kept = append(kept, k, v)
		}
	}
	n.Content = kept
	return true
}

// scalar checks a scalar node for a string, duration, int, bool or float
// target, expanding ${VAR} first, and records a number or duration written
// as zero, with its field's zero tag.
func (w *walker) scalar(n *yaml.Node, t reflect.Type, path string) bool {
	if n.Kind != yaml.ScalarNode {
		want := "a " + t.Kind().String()
		if t == durationType {
			want = "a duration"
		}
		w.errorf(n, path, "wrong-type", "%s: expected %s, got %s", path, want, kindName(n))
		return false
	}
	v, expanded, err := expandEnv(n.Value, w.lookup, w.tag.Get("template") == "true", t == secretType)
	if err != nil {
		w.errorf(n, path, "env", "%s: %v", path, err)
		return false
	}
	if expanded {
		n.Value = v
		n.Tag, n.Style = "", 0 // re-resolve the expanded text as a plain scalar
	}
	tag := n.ShortTag()
	switch {
	case t == durationType && (tag == "!!int" || tag == "!!float"):
		w.errorf(n, path, "duration", "%s: %q has no unit; write a duration such as \"%ss\"", path, n.Value, n.Value)
		return false
	case t == durationType && tag != "!!str":
		w.errorf(n, path, "wrong-type", "%s: expected a duration such as \"1s\", got %s", path, kindName(n))
		return false
	case t.Kind() == reflect.String:
		if tag == "!!null" && !expanded {
			n.Value = "" // "~" or "null" written in the file; an expanded value stays as it is
		}
		n.Tag, n.Style = "!!str", yaml.DoubleQuotedStyle
		return true
	case t.Kind() == reflect.Bool && tag != "!!bool":
		w.errorf(n, path, "wrong-type", "%s: expected true or false, got %s", path, kindName(n))
		return false
	case (t.Kind() == reflect.Int || t.Kind() == reflect.Int64) && t != durationType && tag != "!!int":
		w.errorf(n, path, "wrong-type", "%s: expected an integer, got %s", path, kindName(n))
		return false
	case t.Kind() == reflect.Float64 && tag != "!!float" && tag != "!!int":
		w.errorf(n, path, "wrong-type", "%s: expected a number, got %s", path, kindName(n))
		return false
	}
	// Decode as the final decode will, to find what it would reject.
	val := reflect.New(t)
	err = n.Decode(val.Interface())
	f, isFloat := val.Elem().Interface().(float64)
	switch {
	case err != nil && t == durationType:
		w.errorf(n, path, "duration", "%s: %v", path, err)
		return false
	case isFloat && (err != nil || math.IsNaN(f) || math.IsInf(f, 0)):
		w.errorf(n, path, "wrong-type", "%s: expected a number, got %s", path, kindName(n))
		return false
	case err != nil:
		w.errorf(n, path, "wrong-type", "%s: %s is out of range", path, n.Value)
		return false
	}
	if t.Kind() != reflect.Bool && val.Elem().IsZero() {
		w.src.zero[path] = w.tag.Get("zero")
	}
	return true
}

// kindName describes a node for messages.
func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.AliasNode:
		return "an alias"
	}
	switch n.ShortTag() {
	case "!!str":
		return fmt.Sprintf("the string %q", n.Value)
	case "!!null":
		return "null"
	}
	return strconv.Quote(n.Value)
}

// yamlFields maps the yaml names of t's exported fields to their fields.
func yamlFields(t reflect.Type) map[string]reflect.StructField {
	m := make(map[string]reflect.StructField, t.NumField())
	for i := range t.NumField() {
		if f := t.Field(i); f.IsExported() {
			m[yamlName(f)] = f
		}
	}
	return m
}

// yamlName is the key of field f in YAML.
func yamlName(f reflect.StructField) string {
	name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
	return cmp.Or(name, strings.ToLower(f.Name))
}

// suggest proposes the closest known key for a misspelt one.
func suggest(key string, fields map[string]reflect.StructField) string {
	best, bestD := "", 3
	for name := range fields {
		if d := editDistance(key, name); d < bestD || (d == bestD && best != "" && name < best) {
			best, bestD = name, d
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf(" (did you mean %q?)", best)
}

func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return 99
	}
	prev, cur := make([]int, len(b)+1), make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			c := 1
			if a[i-1] == b[j-1] {
				c = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+c)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
