package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/gobridge/gobridge/processors"
	"github.com/gobridge/gobridge/routes"
)

// CheckCommand validates a config file: `gobridge check -c FILE
// [--format text|json]`. It prints every problem and fails (errInvalid) if
// any is an error; warnings alone do not fail.
type CheckCommand struct {
	Stdout, Stderr io.Writer
}

// Run parses args and checks the config they name.
func (c *CheckCommand) Run(_ context.Context, args []string) error {
	fs := flag.NewFlagSet("check", flag.ContinueOnError)
	fs.SetOutput(c.Stderr)
	path := fs.String("c", "", "config `FILE` to check (required)")
	format := fs.String("format", "text", "output `format`: text (FILE:LINE:COL: RULE: message) or json")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: gobridge check -c FILE [--format text|json]

Check loads FILE exactly as "gobridge run" would and prints every problem,
one per line as FILE:LINE:COL: RULE: message (warnings read
"RULE: warning: message"), or as a JSON array with --format json.
Exit status: 0 valid (warnings allowed), 1 invalid, 2 usage error.

Flags:
`)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return err
		}
		return errUsage
	}
	if *path == "" || fs.NArg() > 0 || (*format != "text" && *format != "json") {
		switch {
		case *path == "":
			fmt.Fprintln(c.Stderr, "check: -c FILE is required")
		case fs.NArg() > 0:
			fmt.Fprintf(c.Stderr, "check: unexpected argument %q\n", fs.Arg(0))
		default:
			fmt.Fprintf(c.Stderr, "check: --format must be text or json, not %q\n", *format)
		}
		fs.Usage()
		return errUsage
	}
	_, probs, err := loadConfig(*path)
	if err != nil {
		return err
	}
	if err := c.print(probs, *format); err != nil {
		return fmt.Errorf("write problems: %w", err)
	}
	if probs.HasErrors() {
		return errInvalid
	}
	return nil
}

func (c *CheckCommand) print(probs routes.Problems, format string) error {
	if format == "json" {
		return probs.WriteJSON(c.Stdout)
	}
	if err := probs.WriteText(c.Stdout); err != nil {
		return err
	}
	errs, warns := len(probs.Errors()), len(probs.Warnings())
	if errs == 0 {
		_, err := fmt.Fprintf(c.Stderr, "config ok (%d warnings)\n", warns)
		return err
	}
	_, err := fmt.Fprintf(c.Stderr, "config invalid: %d errors, %d warnings\n", errs, warns)
	return err
}

// compileProblems compiles every route's processors and ordering key as the
// runtime will, so that `check` reports an expression that does not compile
// with its position. Problems the routes validator already reported at the
// same position are not repeated.
func compileProblems(cfg *routes.Config, known routes.Problems) routes.Problems {
	at := map[[2]int]bool{}
	for _, p := range known {
		if p.Severity == routes.SeverityError {
			at[[2]int{p.Line, p.Column}] = true
		}
	}
	var out routes.Problems
	for i, rc := range cfg.Routes {
		_, err := processors.Compile(rc)
		var ces processors.CompileErrors
		if !errors.As(err, &ces) {
			if err != nil {
				out = append(out, cfg.Errorf(fmt.Sprintf("routes[%d]", i), "processor", "routes[%d]: %v", i, err))
			}
			continue
		}
		for _, ce := range ces {
			path := fmt.Sprintf("routes[%d].%s", i, ce.Path())
			p := cfg.Errorf(path, "processor", "%s: %v", path, ce.Err)
			if at[[2]int{p.Line, p.Column}] {
				continue
			}
			at[[2]int{p.Line, p.Column}] = true
			out = append(out, p)
		}
	}
	return out
}
