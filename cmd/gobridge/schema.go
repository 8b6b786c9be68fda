package main

import (
	"context"
	"io"

	"github.com/gobridge/gobridge/schema"
)

// SchemaCommand prints the JSON Schema of the config file: `gobridge
// schema`. The schema is generated from the Go config types (package
// schema); editors use it to complete and check blueprints.
type SchemaCommand struct {
	Stdout, Stderr io.Writer
}

const schemaUsage = `Usage: gobridge schema > gobridge.schema.json

Schema prints the JSON Schema (draft 2020-12) of gobridge's config file,
generated from the Go config types. Point an editor at it, e.g. with a
first line "# yaml-language-server: $schema=gobridge.schema.json" for the
YAML language server, to get completion and misspelt keys flagged as you
type. "gobridge check" stays the full validator.
`

// Run prints the schema on stdout.
func (c *SchemaCommand) Run(_ context.Context, args []string) error {
	if err := parseFlags(newFlags("schema", schemaUsage, c.Stderr), args); err != nil {
		return err
	}
	_, err := c.Stdout.Write(schema.JSON())
	return err
}
