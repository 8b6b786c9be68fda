package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/gobridge/gobridge/stores/dynamodb"
)

// errNoDynamoDB is returned by create-tables when the outbox is not dynamodb.
var errNoDynamoDB = errors.New("the config's stores.outbox is not of type dynamodb: there is no table to create")

// DynamoDBCommand manages the DynamoDB table of a config:
// `gobridge dynamodb create-tables -c FILE`.
type DynamoDBCommand struct {
	Stdout, Stderr io.Writer
}

const dynamodbUsage = `Usage: gobridge dynamodb create-tables -c FILE

Create-tables creates the DynamoDB table that FILE's stores.outbox names
(type dynamodb; table, region and endpoint from its options, credentials
from the default AWS chain): one table for records and leases, keyed by pk
and sk, with TTL on ttl. It waits until the table is active (a minute or
two on AWS; run it again if it was interrupted). A table that already
exists has its layout checked (another key schema or secondary indexes is
an error) and is left as it is, except that it gets TTL on ttl if it has
none. Meant for a test or a first deployment; production tables are
better created by infrastructure code (README, "Creating the table"). It
needs dynamodb:CreateTable, DescribeTable, DescribeTimeToLive and
UpdateTimeToLive.
`

// Run parses args and runs the subcommand.
func (c *DynamoDBCommand) Run(ctx context.Context, args []string) error {
	if _, err := subcommand(args, dynamodbUsage, c.Stdout, c.Stderr, "create-tables"); err != nil {
		return err
	}
	fs := newFlags("dynamodb create-tables", dynamodbUsage+"\nFlags:\n", c.Stderr)
	path := fs.String("c", "", "config `FILE` naming the dynamodb outbox (required)")
	if err := parseFlags(fs, args[1:]); err != nil {
		return err
	}
	cfg, err := loadValid(fs, *path)
	if err != nil {
		return err
	}
	sc := cfg.Stores.Outbox
	if sc == nil || sc.Type != "dynamodb" {
		return errNoDynamoDB
	}
	// Open creates the table when missing and checks its layout.
	st, err := dynamodb.Open(ctx, dynamodb.Options{Table: sc.Options.Table, Region: sc.Options.Region,
		Endpoint: sc.Options.Endpoint, CreateTables: true})
	if err != nil {
		return fmt.Errorf("dynamodb create-tables: %w", err)
	}
	_ = st.Close()
	fmt.Fprintf(c.Stdout, "outbox table %s (records and leases): ready\n", sc.Options.Table)
	return nil
}
