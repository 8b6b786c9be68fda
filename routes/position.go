package routes

import (
	"fmt"
	"iter"
	"strings"
)

// pos is a line and column in a YAML file, both 1-based.
type pos struct{ line, col int }

// source records where a config came from: the file name, the position of
// every field path that was present, the paths whose values were rejected
// while decoding (later rules stay quiet about those), and the number and
// duration fields written as zero ("0", "0s"; null is not a zero) with what
// 0 means there (their zero tag, see checkExplicitZeros). The zero
// value (a config built in code) has no positions: every lookup misses.
type source struct {
	file   string
	index  map[string]pos
	broken map[string]bool
	zero   map[string]string
}

// Has reports whether path (e.g. "routes[2].policy.send_timeout") was
// written in the YAML file.
func (c *Config) Has(path string) bool {
	_, ok := c.src.index[path]
	return ok
}

// wroteZero reports whether the number or duration at path was written in
// the file as zero ("0", "0.0", "0s", or ${VAR} expanding to one), as
// opposed to left out (or null), which takes the default.
func (c *Config) wroteZero(path string) bool {
	_, ok := c.src.zero[path]
	return ok
}

// Position returns the line and column of the YAML node at path, such as
// "routes[2].policy.send_timeout". When the field is absent it falls back to
// the nearest present parent ("routes[2].policy", then "routes[2]", ...),
// and to 1:1 at worst.
func (c *Config) Position(path string) (line, col int) {
	for p := range lineage(path) {
		if at, ok := c.src.index[p]; ok && at.line > 0 {
			return at.line, at.col
		}
	}
	return 1, 1
}

// lineage yields path and then each of its parents, ending with the root
// "": "a.b[2]", "a.b", "a", "".
func lineage(path string) iter.Seq[string] {
	return func(yield func(string) bool) {
		for yield(path) && path != "" {
			path = path[:max(strings.LastIndexAny(path, ".["), 0)]
		}
	}
}

// Errorf returns an error positioned at path, such as
// "routes[2].policy.send_timeout". Compile steps outside this package (such
// as expression compilation in processors) use it to report positioned
// problems in the same format as the validator.
func (c *Config) Errorf(path, rule, format string, args ...any) Problem {
	return c.problem(path, rule, SeverityError, format, args...)
}

// Warnf is Errorf for a warning.
func (c *Config) Warnf(path, rule, format string, args ...any) Problem {
	return c.problem(path, rule, SeverityWarning, format, args...)
}

func (c *Config) problem(path, rule string, sev Severity, format string, args ...any) Problem {
	p := Problem{File: c.src.file, Rule: rule, Severity: sev, Message: fmt.Sprintf(format, args...), path: path}
	p.Line, p.Column = c.Position(path)
	return p
}

// isBroken reports whether path or one of its parents held a value that was
// rejected while decoding.
func (c *Config) isBroken(path string) bool {
	for p := range lineage(path) {
		if c.src.broken[p] {
			return true
		}
	}
	return false
}

func joinPath(parent, name string) string {
	if parent == "" {
		return name
	}
	return parent + "." + name
}
