package schema

import (
	"encoding/json"
	"path"
	"path/filepath"
	"strings"

	"github.com/invopop/jsonschema"
)

// validateRules is what the schema takes from a field's validate tag
// (go-playground/validator syntax).
type validateRules struct {
	required bool
	oneOf    []string
	min, max json.Number
}

// parseValidate reads the rules that apply to the field itself: those
// before "dive" (the ones after it apply to a list's elements).
func parseValidate(tag string) validateRules {
	var r validateRules
	for _, rule := range strings.Split(tag, ",") {
		name, arg, _ := strings.Cut(rule, "=")
		switch name {
		case "dive":
			return r
		case "required":
			r.required = true
		case "oneof":
			r.oneOf = strings.Fields(arg)
		case "min":
			r.min = json.Number(arg)
		case "max":
			r.max = json.Number(arg)
		}
	}
	return r
}

// addComments reads the Go doc comments of root/SourceDir into r, keyed by
// the package's import path, as jsonschema.Reflector.AddGoComments does
// for a path relative to the working directory.
func addComments(r *jsonschema.Reflector, root string) error {
	dir := filepath.Join(root, SourceDir)
	if err := r.AddGoComments(module, dir); err != nil {
		return err
	}
	// AddGoComments names the package by joining module and dir; rename it
	// to the real import path, whatever root was.
	got, want := path.Join(module, filepath.ToSlash(dir)), path.Join(module, SourceDir)
	for k, v := range r.CommentMap {
		if rest, ok := strings.CutPrefix(k, got+"."); ok {
			delete(r.CommentMap, k)
			r.CommentMap[want+"."+rest] = v
		}
	}
	return nil
}
