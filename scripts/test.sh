#!/usr/bin/env bash
# test.sh — the whole test suite: starts the services it needs
# (scripts/test-services.sh), then runs every Go test with the race detector.
# Extra arguments go to `go test` (e.g. `bash scripts/test.sh -run TestStore`).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/test-services.sh
# shellcheck disable=SC1091
. "${SVC_STATE:-${TMPDIR:-/tmp}/gobridge-services/state}/services.env"
go vet ./...
go test -race -shuffle on -timeout 25m "$@" ./...
