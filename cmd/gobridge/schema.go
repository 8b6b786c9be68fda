package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/gobridge/gobridge/schema"
)

// SchemaCommand prints the JSON Schema of the config file: `gobridge
// schema`. The schema is generated from the Go config types (package
// schema); editors use it to complete and check blueprints.
type SchemaCommand struct {
	Stdout, Stderr io.Writer
}

// Run prints the schema on stdout.
func (c *SchemaCommand) Run(_ context.Context, args []string) error {
	fs := flag.NewFlagSet("schema", flag.ContinueOnError)
	fs.SetOutput(c.Stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: gobridge schema > gobridge.schema.json

Schema prints the JSON Schema (draft 2020-12) of gobridge's config file,
generated from the Go config types. Point an editor at it, e.g. with a
first line "# yaml-language-server: $schema=gobridge.schema.json" for the
YAML language server, to get completion and misspelt keys flagged as you
type. "gobridge check" stays the full validator.
`)
	}
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return err
		}
		return errUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(c.Stderr, "schema: unexpected argument %q\n", fs.Arg(0))
		fs.Usage()
		return errUsage
	}
	_, err := c.Stdout.Write(schema.JSON())
	return err
}
