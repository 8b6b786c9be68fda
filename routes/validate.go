package routes

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"

	"github.com/go-playground/validator/v10"
)

var (
	validateOnce sync.Once
	fieldRules   *validator.Validate
)

// fieldValidator returns the shared validator for the field-level rules
// written as `validate` tags in config.go, naming fields by their yaml keys.
func fieldValidator() *validator.Validate {
	validateOnce.Do(func() {
		fieldRules = validator.New(validator.WithRequiredStructEnabled())
		fieldRules.RegisterTagNameFunc(func(f reflect.StructField) string {
			name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			if name == "-" {
				return ""
			}
			return name
		})
	})
	return fieldRules
}

// Validate checks a config whose defaults have been applied (Parse and Load
// do both) and returns every problem, errors and warnings, in the order
// found. Problems about values that were already rejected while decoding
// are left out.
func (c *Config) Validate() Problems {
	var ps Problems
	add := func(p Problem) {
		if !c.isBroken(p.path) {
			ps = append(ps, p)
		}
	}
	c.fieldProblems(add)
	c.checkVersion(add)
	c.checkBridge(add)
	c.checkStores(add)
	c.checkDiskSpace(add)
	c.checkReceivers(add)
	c.checkListenConflicts(add)
	c.checkSenders(add)
	c.checkRoutes(add)
	c.checkDivergentSessions(add)
	c.checkExplicitZeros(add)
	c.checkWiring(add)
	c.checkTargets(add)
	return ps
}

// fieldProblems runs the validate tags and maps each failure to its YAML
// path and position.
func (c *Config) fieldProblems(add func(Problem)) {
	err := fieldValidator().Struct(c)
	var verrs validator.ValidationErrors
	if !errors.As(err, &verrs) {
		if err != nil {
			add(c.Errorf("", "internal", "validate: %v", err))
		}
		return
	}
	for _, fe := range verrs {
		path := fe.Namespace()
		if _, rest, ok := strings.Cut(path, "."); ok {
			path = rest // drop the root type name
		}
		if path == "version" {
			continue // checkVersion says it better
		}
		add(c.fieldProblem(path, fe))
	}
}

func (c *Config) fieldProblem(path string, fe validator.FieldError) Problem {
	switch fe.Tag() {
	case "required":
		if fe.Kind() == reflect.Slice {
			return c.Errorf(path, "required", "%s: at least one entry is required", path)
		}
		return c.Errorf(path, "required", "%s is required", path)
	case "oneof":
		opts := strings.Fields(fe.Param())
		return c.Errorf(path, "enum", "%s must be one of %s; got %q", path, strings.Join(opts, ", "), fmt.Sprint(fe.Value()))
	case "min", "gte":
		return c.Errorf(path, "range", "%s must be at least %s; got %v", path, fe.Param(), deref(fe.Value()))
	case "max", "lte":
		return c.Errorf(path, "range", "%s must be at most %s; got %v", path, fe.Param(), deref(fe.Value()))
	case "gt":
		return c.Errorf(path, "range", "%s must be greater than %s; got %v", path, fe.Param(), deref(fe.Value()))
	}
	return c.Errorf(path, fe.Tag(), "%s fails rule %s", path, fe.Tag())
}

func deref(v any) any {
	rv := reflect.ValueOf(v)
	if rv.Kind() == reflect.Pointer && !rv.IsNil() {
		return rv.Elem().Interface()
	}
	return v
}
