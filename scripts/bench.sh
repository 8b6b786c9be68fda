#!/usr/bin/env bash
# bench.sh: gobridge's bench harness. It starts the test services (Mosquitto,
# fauxqs, DynamoDB Local: scripts/test-services.sh) and runs the Go benchmarks
# and the process-level bench tests behind the figures in BENCHMARKS.md, then
# prints one line per result ("Benchmark..." or "BENCH ..."). The full output
# is kept in a log file.
#
#   bash scripts/bench.sh                 # every area but outage, once each (~30 min)
#   bash scripts/bench.sh -count 3        # three runs each, for medians
#   bash scripts/bench.sh e2e outage      # only some areas
#   GOBRIDGE_E2E_BINARY=/tmp/old/gobridge GOBRIDGE_BENCH_VARIANTS=bare,shared_outbox \
#     bash scripts/bench.sh e2e           # the process-level benches against another build
#
# Areas: stores senders processors dynamodb mqtt bridge e2e outage scaleout.
# e2e (TestBench_EndToEnd) and outage (TestBench_Outage, a 1M-record outage:
# 20-40 min) run gobridge processes; the GOBRIDGE_BENCH_* and GOBRIDGE_OUTAGE_*
# variables of e2e/bench_test.go and e2e/outage_test.go pass through. Figures
# on a shared 2-core machine vary 2-4x between runs: compare runs made in the
# same minutes (interleave builds, as BENCHMARKS.md does).
set -euo pipefail
cd "$(dirname "$0")/.."

count=1
areas=()
while [ $# -gt 0 ]; do
	case "$1" in
	-count) count="$2"; shift 2 ;;
	-h|--help) sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	stores|senders|processors|dynamodb|mqtt|bridge|e2e|outage|scaleout) areas+=("$1"); shift ;;
	*) echo "bench.sh: unknown argument $1 (see -h)" >&2; exit 2 ;;
	esac
done
[ ${#areas[@]} -gt 0 ] || areas=(stores senders processors dynamodb mqtt bridge e2e scaleout)

bash scripts/test-services.sh
# shellcheck disable=SC1091
. /tmp/gobridge-services/state/services.env

log="/tmp/gobridge-bench/$(date -u +%Y%m%dT%H%M%SZ).log"
mkdir -p "$(dirname "$log")"
echo "bench.sh: $(git rev-parse --short HEAD 2>/dev/null || echo '?'), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); log: $log" | tee "$log"

bench() { # area, then the go test arguments
	local area="$1"
	shift
	echo "== $area: go test $* -count $count (load $(cut -d' ' -f1-3 /proc/loadavg))" | tee -a "$log"
	go test "$@" -count "$count" 2>&1 | tee -a "$log" | grep -E '^(Benchmark|FAIL|---)|BENCH ' || true
}

for a in "${areas[@]}"; do
	case "$a" in
	stores)
		bench stores -run '^$' -bench . -benchtime 200x -timeout 40m ./stores/sqlite/
		bench stores -run '^$' -bench . -benchtime 2000x ./stores/memory/ ;;
	senders) bench senders -run '^$' -bench . -benchtime 2s ./senders/http/ ./senders/sqs/ ;;
	processors) bench processors -run '^$' -bench 'Chain|Template_Render|DecodeJSON' -benchmem ./processors/ ./message/ ;;
	dynamodb) bench dynamodb -run '^$' -bench . -benchtime 20x ./stores/dynamodb/ ;;
	mqtt) bench mqtt -run '^$' -bench . -benchtime 20000x ./receivers/mqtt/ ./receivers/listener/ ;;
	bridge) bench bridge -run '^$' -bench 'EndToEnd|ConfirmedIngest' -benchtime 20000x -timeout 30m ./bridge/ ;;
	e2e) GOBRIDGE_BENCH=1 bench e2e -run '^TestBench_EndToEnd$' -v -timeout 60m ./e2e/ ;;
	outage) GOBRIDGE_BENCH=1 bench outage -run '^TestBench_Outage$' -v -timeout 120m ./e2e/ ;;
	scaleout) bench scaleout -run '^$' -bench ScaleOut -benchtime 1x -timeout 30m ./e2e/ ;;
	esac
done
echo "bench.sh: done; full output in $log"
