package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/gobridge/gobridge/bridge"
	"github.com/gobridge/gobridge/processors"
	"github.com/gobridge/gobridge/routes"
)

// CheckCommand is `gobridge check` (checkUsage says what it does). It
// fails with errInvalid on any error, or with --strict on any problem.
type CheckCommand struct {
	Stdout, Stderr io.Writer
}

const checkUsage = `Usage: gobridge check [--format text|json|github] [--strict] FILE...

Check loads each FILE exactly as "gobridge run" would and prints every
problem of every file, one per line as FILE:LINE:COL: RULE: message
(warnings read "RULE: warning: message"), as one JSON array with
--format json, or as GitHub workflow annotations with --format github.
FILE may be a glob ('blueprints/*.yaml'), expanded by check itself when
the shell did not; -c FILE is the same as a FILE argument. Flags may come
before or after the files. A file that cannot be read and a pattern that
matches no file are reported as problems.
Exit status: 0 no errors (and with --strict no warnings), 1 at least one
error (or, with --strict, a warning), 2 usage error.

Flags:
`

// Run parses args and checks the configs they name.
func (c *CheckCommand) Run(_ context.Context, args []string) error {
	fset := newFlags("check", checkUsage, c.Stderr)
	var targets []string // -c FILEs and FILE arguments, in the order given
	fset.Func("c", "config `FILE` to check (may be repeated; the same as a FILE argument)", func(f string) error {
		targets = append(targets, f)
		return nil
	})
	format := formatFlag(fset, "text", "json", "github")
	strict := fset.Bool("strict", false, "fail (exit 1) on warnings as well as errors")
	if err := parseArgs(fset, args, &targets); err != nil {
		return err
	}
	if len(targets) == 0 {
		return usageErr(fset, "check: no config file given")
	}
	paths, probs := expandTargets(targets)
	for _, p := range paths {
		probs = append(probs, checkFile(p)...)
	}
	if err := c.print(probs, *format, len(paths)); err != nil {
		return fmt.Errorf("write problems: %w", err)
	}
	if probs.HasErrors() || (*strict && len(probs) > 0) {
		return errInvalid
	}
	return nil
}

// expandTargets turns the command line's files and patterns into the list
// of files to check, in the order given and without repeats. A target that
// names an existing path is used as it is, even if it holds glob
// characters; otherwise a target with glob characters is expanded with
// filepath.Glob (for a shell that did not expand it, or a quoted pattern).
// A pattern that is malformed or matches nothing is a problem.
func expandTargets(targets []string) ([]string, routes.Problems) {
	var paths []string
	var probs routes.Problems
	add := func(p string) {
		if !slices.Contains(paths, p) {
			paths = append(paths, p)
		}
	}
	for _, t := range targets {
		if _, err := os.Lstat(t); err == nil || !strings.ContainsAny(t, `*?[\`) {
			add(t)
			continue
		}
		matches, err := filepath.Glob(t)
		switch {
		case err != nil:
			probs = append(probs, fileProblem(t, "glob", fmt.Sprintf("%q is not a valid pattern: %v", t, err)))
		case len(matches) == 0:
			probs = append(probs, fileProblem(t, "glob", fmt.Sprintf("no file matches %q", t)))
		}
		for _, m := range matches {
			add(m)
		}
	}
	return paths, probs
}

// checkFile loads one config and returns its problems, sorted by position;
// a file that cannot be read is one problem.
func checkFile(path string) routes.Problems {
	_, probs, err := loadConfig(path)
	if pe, ok := errors.AsType[*fs.PathError](err); ok {
		err = pe.Err
	}
	if err != nil {
		return routes.Problems{fileProblem(path, "file", "cannot read the config: "+err.Error())}
	}
	return probs
}

// fileProblem is an error about a whole file (or pattern): it has no line.
func fileProblem(file, rule, msg string) routes.Problem {
	return routes.Problem{File: file, Rule: rule, Severity: routes.SeverityError, Message: msg}
}

func (c *CheckCommand) print(probs routes.Problems, format string, files int) error {
	switch format {
	case "json":
		return probs.WriteJSON(c.Stdout)
	case "github":
		return probs.WriteGitHub(c.Stdout)
	}
	if err := probs.WriteText(c.Stdout); err != nil {
		return err
	}
	errs, warns := len(probs.Errors()), len(probs.Warnings())
	what := "config"
	if files != 1 {
		what = fmt.Sprintf("%d configs", files)
	}
	if errs == 0 {
		_, err := fmt.Fprintf(c.Stderr, "%s ok (%s)\n", what, count(warns, "warning"))
		return err
	}
	_, err := fmt.Fprintf(c.Stderr, "%s invalid: %s, %s\n", what, count(errs, "error"), count(warns, "warning"))
	return err
}

// count is "1 error", "2 errors".
func count(n int, noun string) string {
	if n != 1 {
		noun += "s"
	}
	return fmt.Sprintf("%d %s", n, noun)
}

// compileProblems builds every sender and compiles every route's
// processors and ordering key as the bridge will, so that `check` reports
// what they refuse with its position. Problems the routes validator
// already reported (at the same position; for a sender, anywhere in it)
// are not repeated.
func compileProblems(cfg *routes.Config, known routes.Problems) routes.Problems {
	at := map[[2]int]bool{}
	for _, p := range known {
		if p.Severity == routes.SeverityError {
			at[[2]int{p.Line, p.Column}] = true
		}
	}
	var out routes.Problems
	if err := bridge.CheckStore(cfg.Stores.Outbox); err != nil && !known.ErrorUnder("stores.outbox") {
		out = append(out, cfg.Errorf("stores.outbox", "store", "stores.outbox: %v", err))
	}
	for i, sc := range cfg.Senders {
		path := fmt.Sprintf("senders[%d]", i)
		if err := bridge.CheckSender(sc); err != nil && !known.ErrorUnder(path) {
			out = append(out, cfg.Errorf(path, "sender", "%s: %v", path, err))
		}
	}
	for i, rc := range cfg.Routes {
		_, err := processors.Compile(rc, 0)
		ces, ok := errors.AsType[processors.CompileErrors](err)
		if err != nil && !ok {
			out = append(out, cfg.Errorf(fmt.Sprintf("routes[%d]", i), "processor", "routes[%d]: %v", i, err))
		}
		for _, ce := range ces {
			path := fmt.Sprintf("routes[%d].%s", i, ce.Path())
			p := cfg.Errorf(path, "processor", "%s: %v", path, ce.Err)
			if !at[[2]int{p.Line, p.Column}] {
				at[[2]int{p.Line, p.Column}] = true
				out = append(out, p)
			}
		}
	}
	return out
}
