package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/gobridge/gobridge/routes"
	"github.com/gobridge/gobridge/stores/dynamodb"
)

// errNoDynamoDB is returned by create-tables when neither store is dynamodb.
var errNoDynamoDB = errors.New("the config has no dynamodb store (stores.outbox or stores.lease): there are no tables to create")

// DynamoDBCommand manages the DynamoDB tables of a config:
// `gobridge dynamodb create-tables -c FILE`.
type DynamoDBCommand struct {
	Stdout, Stderr io.Writer
}

const dynamodbUsage = `Usage: gobridge dynamodb create-tables -c FILE

Create-tables creates the DynamoDB tables that FILE's stores.outbox and
stores.lease name (type dynamodb; table, region and endpoint from their
options, credentials from the default AWS chain): the outbox table with its
seven indexes and TTL on gc_at, and the lease table. A table that already
exists is left as it is; the outbox table's layout is then checked, and a
table that lacks an index is an error. It waits until the tables are
active (a minute or two on AWS). Meant for a test or a first deployment;
production tables are better created by infrastructure code (README,
"Creating the tables"). It needs dynamodb:CreateTable, DescribeTable,
UpdateTimeToLive and DescribeTimeToLive.
`

// Run parses args and runs the subcommand.
func (c *DynamoDBCommand) Run(ctx context.Context, args []string) error {
	if len(args) == 0 || args[0] != "create-tables" {
		if len(args) > 0 && isHelp(args[0]) {
			fmt.Fprint(c.Stdout, dynamodbUsage)
			return flag.ErrHelp
		}
		fmt.Fprint(c.Stderr, dynamodbUsage)
		return errUsage
	}
	fs := flag.NewFlagSet("dynamodb create-tables", flag.ContinueOnError)
	fs.SetOutput(c.Stderr)
	path := fs.String("c", "", "config `FILE` naming the dynamodb stores (required)")
	fs.Usage = func() { fmt.Fprint(fs.Output(), dynamodbUsage+"\nFlags:\n"); fs.PrintDefaults() }
	if err := fs.Parse(args[1:]); err != nil {
		return parseErr(err)
	}
	switch {
	case *path == "":
		return usageErr(fs, c.Stderr, "dynamodb create-tables: -c FILE is required")
	case fs.NArg() > 0:
		return usageErr(fs, c.Stderr, fmt.Sprintf("dynamodb create-tables: unexpected argument %q", fs.Arg(0)))
	}
	cfg, probs, err := loadConfig(*path)
	if err != nil {
		return err
	}
	if probs.HasErrors() {
		_ = probs.Errors().WriteText(c.Stderr)
		fmt.Fprintf(c.Stderr, "config invalid: %d errors\n", len(probs.Errors()))
		return errInvalid
	}
	sc := cfg.Stores.Outbox
	if sc == nil || sc.Type != "dynamodb" {
		return errNoDynamoDB
	}
	opts := dynamoOpts(sc)
	// Open creates the table when missing and checks its layout.
	st, err := dynamodb.Open(ctx, opts)
	if err != nil {
		return fmt.Errorf("dynamodb create-tables: %w", err)
	}
	_ = st.Close()
	fmt.Fprintf(c.Stdout, "outbox table %s (records and leases): ready\n", opts.Table)
	return nil
}

// dynamoOpts maps a store config to the backend's options as the bridge
// does, with CreateTables set.
func dynamoOpts(sc *routes.StoreConfig) dynamodb.Options {
	return dynamodb.Options{Table: sc.Options.Table, Region: sc.Options.Region, Endpoint: sc.Options.Endpoint, CreateTables: true}
}
