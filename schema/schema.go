// Package schema holds the JSON Schema of gobridge's config file,
// gobridge.schema.json in this directory, generated from the Go type
// routes.Config by Generate (generate_test.go: only the test regenerates
// it). `gobridge schema` prints the committed file
// (JSON); a test fails when it differs from what Generate makes of the
// current types, so the file follows every config change. Regenerate it
// with:
//
//	go test ./schema -run TestSchema_UpToDate -update
package schema

import _ "embed"

//go:embed gobridge.schema.json
var committed []byte

// JSON returns the committed schema. The caller must not modify it.
func JSON() []byte { return committed }
