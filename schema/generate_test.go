package schema

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"

	"github.com/invopop/jsonschema"

	"github.com/gobridge/gobridge/routes"
)

// module is the import path the Go comments of SourceDir are read as.
const module = "github.com/gobridge/gobridge"

// SourceDir is the directory, relative to the repository root, whose Go doc
// comments become the schema's descriptions.
const SourceDir = "routes"

// Patterns shared by the generated schema.
const (
	// envPattern matches a value that holds a ${VAR} or ${VAR:-default}
	// reference; the loader expands it before decoding, so any field may
	// hold one.
	envPattern = `\$\{[A-Za-z_][A-Za-z0-9_]*(:-[^}]*)?\}`
	// durationPattern matches a Go duration with a unit ("1s", "1m30s",
	// "250ms"), or "0". A bare number is not a duration in gobridge.
	durationPattern = `^(0|(([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h))+)$`
)

var (
	durationType = reflect.TypeFor[routes.Duration]()
	secretType   = reflect.TypeFor[routes.Secret]()
)

// Generate reflects routes.Config into a JSON Schema (draft 2020-12) and
// returns it as indented JSON with a trailing newline. Every object has
// additionalProperties: false, so a misspelt key fails validation; fields
// that take numbers, booleans, durations or one of a set of words also
// accept a string holding a ${VAR} reference, since the loader expands
// those before decoding. Required fields, enums and bounds come from the
// fields' validate tags.
//
// When root is not empty, it is the repository root and the doc comments of
// root/routes become descriptions; Generate("") gives the same schema
// without them.
func Generate(root string) ([]byte, error) {
	r := &jsonschema.Reflector{
		FieldNameTag:               "yaml",
		RequiredFromJSONSchemaTags: true, // required comes from validate tags, below
		Anonymous:                  true,
		ExpandedStruct:             true,
		Mapper: func(t reflect.Type) *jsonschema.Schema {
			// Inline scalars of named types; fieldSchema fills them in.
			if t == durationType || t == secretType {
				return &jsonschema.Schema{}
			}
			return nil
		},
	}
	if root != "" {
		if err := addComments(r, root); err != nil {
			return nil, err
		}
	}
	s := r.Reflect(&routes.Config{})
	s.Title = "gobridge config"
	s.Description = "A gobridge blueprint: the YAML file `gobridge run -c FILE` and `gobridge check` read. " +
		"Generated from the Go type routes.Config; `gobridge schema` prints it."
	s.ID = ""
	if err := refine(s, reflect.TypeFor[routes.Config]()); err != nil {
		return nil, err
	}
	s.Definitions[envDef] = &jsonschema.Schema{Type: "string", Pattern: envPattern,
		Description: "A ${VAR} or ${VAR:-default} reference: the loader expands it from the environment before decoding."}
	s.Definitions[durationDef] = &jsonschema.Schema{
		AnyOf:       []*jsonschema.Schema{{Type: "string", Pattern: durationPattern}, ref(envDef)},
		Description: "A duration with a unit, such as \"500ms\", \"30s\" or \"1h30m\" (a bare number is an error).",
	}
	s.Definitions[textDef] = &jsonschema.Schema{
		AnyOf:       []*jsonschema.Schema{{Type: "string"}, {Type: "number"}},
		Description: "Text; a number is read as its text. May hold ${VAR} references.",
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(s); err != nil {
		return nil, fmt.Errorf("encode schema: %w", err)
	}
	return b.Bytes(), nil
}

// Names of the shared definitions that fieldSchema refers to.
const (
	envDef      = "env"
	durationDef = "duration"
	textDef     = "text"
)

// ref returns a schema that refers to the shared definition name.
func ref(name string) *jsonschema.Schema { return &jsonschema.Schema{Ref: "#/$defs/" + name} }

// refine walks the Go type t (whose schema is root) and the types it
// holds, replacing scalar property schemas with ones that accept ${VAR}
// strings and adding what the validate tags say (required, enums, bounds).
func refine(root *jsonschema.Schema, t reflect.Type) error {
	seen := map[reflect.Type]bool{}
	var walk func(t reflect.Type) error
	walk = func(t reflect.Type) error {
		for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Map {
			t = t.Elem()
		}
		if t.Kind() != reflect.Struct || seen[t] {
			return nil
		}
		seen[t] = true
		def := root.Definitions[t.Name()]
		if len(seen) == 1 {
			def = root // the expanded root type
		}
		if def == nil {
			return fmt.Errorf("schema: no definition for %s", t)
		}
		def.Required = nil
		for i := range t.NumField() {
			f := t.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			if !f.IsExported() || name == "-" {
				continue
			}
			prop, ok := def.Properties.Get(name)
			if !ok {
				return fmt.Errorf("schema: %s has no property %q", t.Name(), name)
			}
			rules := parseValidate(f.Tag.Get("validate"))
			if def == root && name == "version" {
				rules = validateRules{required: true, oneOf: []string{"1"}}
			}
			if rules.required || requiredStruct(f.Type) {
				def.Required = append(def.Required, name)
			}
			if s := fieldSchema(f.Type, rules); s != nil {
				s.Description = prop.Description
				def.Properties.Set(name, s)
			}
			if err := walk(f.Type); err != nil {
				return err
			}
		}
		return nil
	}
	return walk(t)
}

// requiredStruct reports whether a struct-valued field must be present
// because a field inside it is required: the validator dives into a
// non-pointer struct whether it was written or not.
func requiredStruct(t reflect.Type) bool {
	if t.Kind() != reflect.Struct || t == durationType {
		return false
	}
	for i := range t.NumField() {
		f := t.Field(i)
		if f.IsExported() && (parseValidate(f.Tag.Get("validate")).required || requiredStruct(f.Type)) {
			return true
		}
	}
	return false
}

// fieldSchema returns the schema of a field of type t, or nil when t is a
// struct (or a list or map of structs) that keeps its $ref.
func fieldSchema(t reflect.Type, rules validateRules) *jsonschema.Schema {
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch {
	case t == durationType:
		return ref(durationDef)
	case t.Kind() == reflect.Slice:
		if item := fieldSchema(t.Elem(), validateRules{}); item != nil {
			return &jsonschema.Schema{Type: "array", Items: item}
		}
		return nil
	case t.Kind() == reflect.Map:
		if v := fieldSchema(t.Elem(), validateRules{}); v != nil {
			return &jsonschema.Schema{Type: "object", AdditionalProperties: v}
		}
		return nil
	}
	var s *jsonschema.Schema
	switch t.Kind() {
	case reflect.String:
		if len(rules.oneOf) == 0 {
			return ref(textDef)
		}
		s = &jsonschema.Schema{Type: "string"}
		for _, w := range rules.oneOf {
			s.Enum = append(s.Enum, w)
		}
	case reflect.Int, reflect.Int64:
		s = &jsonschema.Schema{Type: "integer", Minimum: rules.min, Maximum: rules.max}
		for _, w := range rules.oneOf {
			s.Enum = append(s.Enum, json.Number(w))
		}
	case reflect.Float64:
		s = &jsonschema.Schema{Type: "number"}
	case reflect.Bool:
		s = &jsonschema.Schema{Type: "boolean"}
	default:
		return nil
	}
	return &jsonschema.Schema{AnyOf: []*jsonschema.Schema{s, ref(envDef)}}
}
