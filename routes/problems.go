package routes

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
)

// Severity says whether a problem makes a config invalid.
type Severity string

// Severities.
const (
	// SeverityError makes the config invalid: check exits 1 and run refuses
	// to start.
	SeverityError Severity = "error"
	// SeverityWarning is printed but does not fail the config.
	SeverityWarning Severity = "warning"
)

// Problem is one thing wrong with a config, positioned at the YAML node at
// fault (or at its parent when the field is absent). A problem about a
// whole file (one that cannot be read) has Line and Column 0.
type Problem struct {
	File     string   `json:"file"`
	Line     int      `json:"line"`
	Column   int      `json:"column"`
	Rule     string   `json:"rule"`
	Severity Severity `json:"severity"`
	Message  string   `json:"message"`

	path string // YAML field path, for filtering; not printed
}

// String formats p as FILE:LINE:COL: RULE: message, or FILE: RULE: message
// for a problem about the whole file. A warning's message starts with
// "warning: ".
func (p Problem) String() string {
	msg := p.Message
	if p.Severity == SeverityWarning {
		msg = "warning: " + msg
	}
	if p.Line == 0 {
		return fmt.Sprintf("%s: %s: %s", p.File, p.Rule, msg)
	}
	return fmt.Sprintf("%s:%d:%d: %s: %s", p.File, p.Line, p.Column, p.Rule, msg)
}

// Problems is every problem found in a config, in file order once sorted.
type Problems []Problem

// HasErrors reports whether any problem is an error (not a warning).
func (ps Problems) HasErrors() bool {
	return slices.ContainsFunc(ps, func(p Problem) bool { return p.Severity != SeverityWarning })
}

// ErrorUnder reports whether an error is about the field at path or one
// inside it.
func (ps Problems) ErrorUnder(path string) bool {
	return slices.ContainsFunc(ps, func(p Problem) bool {
		return p.Severity == SeverityError && (p.path == path || strings.HasPrefix(p.path, path+".") || strings.HasPrefix(p.path, path+"["))
	})
}

// Errors returns only the errors.
func (ps Problems) Errors() Problems { return ps.only(false) }

// Warnings returns only the warnings.
func (ps Problems) Warnings() Problems { return ps.only(true) }

func (ps Problems) only(warnings bool) Problems {
	return slices.DeleteFunc(slices.Clone(ps), func(p Problem) bool { return (p.Severity == SeverityWarning) != warnings })
}

// Sort orders problems by line and column, keeping the order in which
// problems at the same position were found.
func (ps Problems) Sort() {
	slices.SortStableFunc(ps, func(a, b Problem) int {
		return cmp.Or(cmp.Compare(a.File, b.File), cmp.Compare(a.Line, b.Line), cmp.Compare(a.Column, b.Column))
	})
}

// WriteText writes one problem per line in the FILE:LINE:COL: RULE: message
// format.
func (ps Problems) WriteText(w io.Writer) error {
	for _, p := range ps {
		if _, err := fmt.Fprintln(w, p.String()); err != nil {
			return err
		}
	}
	return nil
}

// WriteJSON writes the problems as a JSON array of objects with file, line,
// column, rule, severity and message ([] when there is none); line and
// column are 0 for a problem about a whole file.
func (ps Problems) WriteJSON(w io.Writer) error {
	if ps == nil {
		ps = Problems{}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(ps)
}

// WriteGitHub writes one GitHub Actions workflow command per problem,
// "::error file=F,line=L,col=C::RULE: message" (::warning for a warning;
// no line and col for a problem about a whole file). Values are escaped as
// the runner requires, so no file name or message can end the command
// early or start another.
func (ps Problems) WriteGitHub(w io.Writer) error {
	for _, p := range ps {
		cmd := "error"
		if p.Severity == SeverityWarning {
			cmd = "warning"
		}
		props := "file=" + githubPropertyEscaper.Replace(p.File)
		if p.Line > 0 {
			props += fmt.Sprintf(",line=%d,col=%d", p.Line, p.Column)
		}
		if _, err := fmt.Fprintf(w, "::%s %s::%s\n", cmd, props, githubDataEscaper.Replace(p.Rule+": "+p.Message)); err != nil {
			return err
		}
	}
	return nil
}

var (
	githubDataEscaper     = strings.NewReplacer("%", "%25", "\r", "%0D", "\n", "%0A")
	githubPropertyEscaper = strings.NewReplacer("%", "%25", "\r", "%0D", "\n", "%0A", ":", "%3A", ",", "%2C")
)
