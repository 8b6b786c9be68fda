// Package dynamodb is the DynamoDB backend of the stores contracts: an outbox
// with dead letters (Store) and a lease table (Leases) that several gobridge
// instances can share.
//
// Every state change is a conditional write that names the claimer's fencing
// token; appends are conditional puts (attribute_not_exists) inside one
// TransactWriteItems per chunk; claims read sparse global secondary indexes
// of one session partition, so they cost O(batch), not O(backlog). The table
// layout is described in tables.go and in the README section "dynamodb".
//
// Store implements stores.Inspector without scanning: per (session, route)
// counter items and done-per-minute items are updated in the same
// transactions as the records (see counters.go), and the sparse timer and
// live indexes give claimed, due and oldest.
//
// From a routes.StoreConfig, the bridge opens the outbox with
// Open(ctx, Options{Table: o.Table, Region: o.Region, Endpoint: o.Endpoint})
// and the lease store with OpenLeases and the lease config's options the
// same way (Table defaults per function).
package dynamodb

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/gobridge/gobridge/stores"
)

// Interface guards.
var (
	_ stores.Store     = (*Store)(nil)
	_ stores.Leases    = (*Leases)(nil)
	_ stores.Inspector = (*Store)(nil)
)

// Default table names, as in routes.StoreOptions.
const (
	DefaultTable      = "gobridge_outbox"
	DefaultLeaseTable = "gobridge_leases"
)

// DefaultDoneRetention is how long a done record (delivered, coalesced away,
// requeued or dropped) stays as a key-only tombstone, so that a redelivered
// message within that window is not delivered twice. DynamoDB's TTL deletes
// it afterwards (when TTL is enabled on the table; CreateTables enables it).
const DefaultDoneRetention = 7 * 24 * time.Hour

// Options configures Open and OpenLeases.
type Options struct {
	// Table is the outbox table. Defaults to DefaultTable.
	Table string
	// LeaseTable is the lease table. Defaults to DefaultLeaseTable. It may
	// name the outbox table: both use the same key schema (pk, sk).
	LeaseTable string
	// Region is the AWS region. Empty uses the default chain (AWS_REGION,
	// the shared config file).
	Region string
	// Endpoint overrides the DynamoDB endpoint, for emulators such as
	// DynamoDB Local only (http://127.0.0.1:14568). Empty uses AWS.
	Endpoint string
	// CreateTables creates the table (with its indexes and TTL) when it does
	// not exist, and waits until it is active. Meant for tests and a first
	// deployment; production tables are better created by infrastructure
	// code (see the README for the layout).
	CreateTables bool
	// DoneRetention is how long done tombstones are kept. Defaults to
	// DefaultDoneRetention.
	DoneRetention time.Duration
	// Client, when set, is used instead of one built from Region and
	// Endpoint (tests count requests with it).
	Client *dynamodb.Client
}

func (o *Options) defaults() {
	if o.Table == "" {
		o.Table = DefaultTable
	}
	if o.LeaseTable == "" {
		o.LeaseTable = DefaultLeaseTable
	}
	if o.DoneRetention <= 0 {
		o.DoneRetention = DefaultDoneRetention
	}
}

// Store is a stores.Store on one DynamoDB table. It is safe for concurrent
// use by many goroutines and many processes.
type Store struct {
	db     *dynamodb.Client
	table  string
	opts   Options
	closed atomic.Bool
	// registered holds the sessions this Store has added to the session
	// registry (string → true), so only a session's first append pays
	// for the registry item.
	registered sync.Map
	// perKeyOnly makes Claim check ordering keys with one query per key
	// always (tests exercise that path with it).
	perKeyOnly bool
}

// NewClient builds a DynamoDB client from the default credential chain, with
// opts.Region and opts.Endpoint applied.
func NewClient(ctx context.Context, opts Options) (*dynamodb.Client, error) {
	var lo []func(*config.LoadOptions) error
	if opts.Region != "" {
		lo = append(lo, config.WithRegion(opts.Region))
	}
	cfg, err := config.LoadDefaultConfig(ctx, lo...)
	if err != nil {
		return nil, fmt.Errorf("dynamodb: load aws config: %w", err)
	}
	return dynamodb.NewFromConfig(cfg, func(o *dynamodb.Options) {
		if opts.Endpoint != "" {
			o.BaseEndpoint = aws.String(opts.Endpoint)
			// DynamoDB Local's x-amz-crc32 does not match what the SDK
			// computes; the check guards transport corruption only.
			o.DisableValidateResponseChecksum = true
		}
	}), nil
}

// Open returns the outbox store on opts.Table, creating the table first
// when opts.CreateTables is set. It checks the table's key schema and
// indexes (one DescribeTable) and fails with ErrLayout when they do not
// match, so a misconfigured table is found at startup.
func Open(ctx context.Context, opts Options) (*Store, error) {
	opts.defaults()
	db := opts.Client
	if db == nil {
		var err error
		if db, err = NewClient(ctx, opts); err != nil {
			return nil, err
		}
	}
	if opts.CreateTables {
		if err := CreateOutboxTable(ctx, db, opts.Table); err != nil {
			return nil, err
		}
	}
	if err := checkLayout(ctx, db, outboxTableInput(opts.Table)); err != nil {
		return nil, err
	}
	return &Store{db: db, table: opts.Table, opts: opts}, nil
}

// errClosed is returned by calls after Close.
var errClosed = errors.New("dynamodb: store closed")

// Close implements stores.Outbox: later calls fail. The SDK client holds no
// resources that need closing; Close is idempotent.
func (s *Store) Close() error {
	s.closed.Store(true)
	return nil
}

// Sentinel-mapping helpers. Errors are classified by the SDK's types,
// never by their text.

// cancelReasons returns the per-item reason codes of a cancelled
// transaction.
func cancelReasons(err error) ([]types.CancellationReason, bool) {
	var tce *types.TransactionCanceledException
	if errors.As(err, &tce) {
		return tce.CancellationReasons, true
	}
	return nil, false
}

func reasonCode(r types.CancellationReason) string { return aws.ToString(r.Code) }

const (
	codeNone        = "None"
	codeCondition   = "ConditionalCheckFailed"
	codeConflict    = "TransactionConflict"
	codeThrottled   = "ThrottlingError"
	codeProvisioned = "ProvisionedThroughputExceeded"
)

// retryable reports whether a cancelled transaction failed only because of
// concurrent transactions or throttling, so that the same request may
// succeed later.
func retryable(rs []types.CancellationReason) bool {
	any := false
	for _, r := range rs {
		switch reasonCode(r) {
		case "", codeNone:
		case codeConflict, codeThrottled, codeProvisioned:
			any = true
		default:
			return false
		}
	}
	return any
}

func isConditionFailed(err error) bool {
	var cfe *types.ConditionalCheckFailedException
	return errors.As(err, &cfe)
}

// backoff waits a jittered, growing delay before retry attempt n (0-based),
// or returns ctx's error.
func backoff(ctx context.Context, n int) error {
	d := time.Duration(5<<min(n, 6)) * time.Millisecond
	d = d/2 + rand.N(d)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// maxRetries bounds the retries of a transaction that conflicted with
// another one.
const maxRetries = 12

// transact runs TransactWriteItems, retrying while it conflicts with other
// transactions or is throttled. It returns the last error, which callers
// inspect with cancelReasons.
func (s *Store) transact(ctx context.Context, items []types.TransactWriteItem) error {
	return transact(ctx, s.db, items)
}

func transact(ctx context.Context, db *dynamodb.Client, items []types.TransactWriteItem) error {
	for n := 0; ; n++ {
		_, err := db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: items})
		if err == nil {
			return nil
		}
		rs, ok := cancelReasons(err)
		if !ok || !retryable(rs) || n == maxRetries {
			return err
		}
		if err := backoff(ctx, n); err != nil {
			return err
		}
	}
}
