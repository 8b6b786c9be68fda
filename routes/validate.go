package routes

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
)

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
	c.checkTags(add, reflect.ValueOf(c).Elem(), "")
	c.checkVersion(add)
	c.checkBridge(add)
	c.checkStores(add)
	c.checkDiskSpace(add)
	c.checkReceivers(add)
	c.checkListenConflicts(add)
	c.checkClientIDs(add)
	c.checkSenders(add)
	c.checkRoutes(add)
	c.checkDivergentSessions(add)
	c.checkExplicitZeros(add)
	c.checkUnroutedSubscriptions(add)
	c.checkUnusedSenders(add)
	c.checkDirectHoldNeighbours(add)
	c.checkTargets(add)
	return ps
}

// checkTags runs the field rules written as validate tags in config.go and
// components.go (the JSON Schema reads them too), in the part of
// go-playground/validator's syntax the config types use: required (a list:
// present, even empty), oneof=A B, min=N and max=N (numbers), omitempty and
// omitnil (no rule applies to a zero or nil value), and dive (the rules
// before it are the list's; its elements are structs, checked in turn). A
// field reports its first failing rule only. Fields tagged template:"true"
// are parsed as templates, whatever type their struct has.
func (c *Config) checkTags(add func(Problem), v reflect.Value, path string) {
	switch v.Kind() {
	case reflect.Pointer:
		if !v.IsNil() {
			c.checkTags(add, v.Elem(), path)
		}
	case reflect.Slice:
		for i := range v.Len() {
			c.checkTags(add, v.Index(i), fmt.Sprintf("%s[%d]", path, i))
		}
	case reflect.Struct:
		for i := range v.NumField() {
			f := v.Type().Field(i)
			if !f.IsExported() {
				continue
			}
			fp := joinPath(path, yamlName(f))
			if p, failed := c.tagProblem(v.Field(i), fp, f.Tag.Get("validate")); failed {
				add(p)
			}
			if f.Tag.Get("template") == "true" {
				c.checkTemplates(add, fp, v.Field(i))
			}
			c.checkTags(add, v.Field(i), fp)
		}
	}
}

// checkTemplates checks a field tagged template:"true": a template, or a
// map of them.
func (c *Config) checkTemplates(add func(Problem), path string, v reflect.Value) {
	if v.Kind() == reflect.String {
		c.checkTemplate(add, path, v.String())
		return
	}
	m := v.Interface().(map[string]string)
	for _, k := range slices.Sorted(maps.Keys(m)) {
		c.checkTemplate(add, path+"."+k, m[k])
	}
}

// tagProblem checks v, at path, against the rules of one validate tag.
func (c *Config) tagProblem(v reflect.Value, path, tag string) (Problem, bool) {
	for _, rule := range strings.Split(tag, ",") {
		name, arg, _ := strings.Cut(rule, "=")
		switch name {
		case "dive":
			return Problem{}, false
		case "omitempty", "omitnil":
			if v.IsZero() {
				return Problem{}, false
			}
		case "required":
			if v.IsZero() && v.Kind() == reflect.Slice {
				return c.Errorf(path, "required", "%s: at least one entry is required", path), true
			} else if v.IsZero() {
				return c.Errorf(path, "required", "%s is required", path), true
			}
		case "oneof":
			if opts := strings.Fields(arg); !slices.Contains(opts, v.String()) {
				return c.Errorf(path, "enum", "%s must be one of %s; got %q", path, strings.Join(opts, ", "), v.String()), true
			}
		case "min", "max":
			n := reflect.Indirect(v)
			f := n.Convert(reflect.TypeFor[float64]()).Float()
			bound, _ := strconv.ParseFloat(arg, 64)
			if name == "min" && f < bound {
				return c.Errorf(path, "range", "%s must be at least %s; got %v", path, arg, n), true
			}
			if name == "max" && f > bound {
				return c.Errorf(path, "range", "%s must be at most %s; got %v", path, arg, n), true
			}
		}
	}
	return Problem{}, false
}

// checkExplicitZeros reports every number or duration written as 0 where
// its zero tag says why 0 means nothing useful (an empty tag: 0 is a value
// the field takes as written). setDefaults has put the default in its
// place, but what the file says is not what would run, so the config is
// invalid. TestZeroFields_ClassifiesEveryNumber makes every number and
// duration field carry a zero tag.
func (c *Config) checkExplicitZeros(add func(Problem)) {
	for _, p := range slices.Sorted(maps.Keys(c.src.zero)) {
		if why := c.src.zero[p]; why != "" {
			add(c.Errorf(p, "zero-value", "%s: 0 is not a usable value: %s; leave the field out to use its default", p, why))
		}
	}
}
