// Package e2e holds process-level tests: real gobridge binaries against real brokers, queues and tables.
//
// TestMain builds ./cmd/gobridge once into a temporary directory; each test
// writes its own config into t.TempDir(), with unique client ids, topics,
// queues and tables, so tests can share one Mosquitto, fauxqs and DynamoDB
// Local with other packages' tests. The services come from
// scripts/test-services.sh (see internal/testservices). The tests are
// skipped with -short.
package e2e
