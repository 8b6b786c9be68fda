#!/usr/bin/env bash
# bench.sh: gobridge's bench harness. It starts the test services (Mosquitto,
# fauxqs, DynamoDB Local: scripts/test-services.sh) and runs the Go benchmarks
# behind every figure in BENCHMARKS.md, then prints one line per benchmark with
# its throughput and latency metrics. The full output is kept in a log file.
#
#   bash scripts/bench.sh                 # every area, once each (~15 min)
#   bash scripts/bench.sh -count 3        # three runs each, for medians
#   bash scripts/bench.sh stores e2e      # only some areas
#
# Areas: stores drainer senders processors dynamodb mqtt e2e scaleout. Figures on a
# shared 2-core machine vary 2-4x between runs: compare runs made in the same
# minutes (BENCHMARKS.md interleaves before/after runs for that reason).
set -euo pipefail
cd "$(dirname "$0")/.."

count=1
areas=()
while [ $# -gt 0 ]; do
	case "$1" in
	-count) count="$2"; shift 2 ;;
	-h|--help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	stores|drainer|senders|processors|dynamodb|mqtt|e2e|scaleout) areas+=("$1"); shift ;;
	*) echo "bench.sh: unknown argument $1 (see -h)" >&2; exit 2 ;;
	esac
done
[ ${#areas[@]} -gt 0 ] || areas=(stores drainer senders processors dynamodb mqtt e2e scaleout)

bash scripts/test-services.sh
# shellcheck disable=SC1091
. /tmp/gobridge-services/state/services.env

log="/tmp/gobridge-bench/$(date -u +%Y%m%dT%H%M%SZ).log"
mkdir -p "$(dirname "$log")"
echo "bench.sh: $(git rev-parse --short HEAD 2>/dev/null || echo '?'), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); log: $log" | tee "$log"

bench() { # area, then the go test arguments
	local area="$1"
	shift
	echo "== $area: go test -run '^\$' $* -count $count" | tee -a "$log"
	go test -run '^$' "$@" -count "$count" 2>&1 | tee -a "$log" | grep -E '^(Benchmark|FAIL|---)' || true
}

for a in "${areas[@]}"; do
	case "$a" in
	stores)
		bench stores -bench . -benchtime 200x -timeout 40m ./stores/sqlite/
		bench stores -bench . -benchtime 2000x ./stores/memory/ ;;
	drainer) bench drainer -bench 'BenchmarkDrainer|BenchmarkStoreBaseline' -benchtime 1x ./drainer/ ;;
	senders) bench senders -bench . -benchtime 2s ./senders/http/ ./senders/sqs/ ;;
	processors) bench processors -bench 'Chain|Template_Render|DecodeJSON' -benchmem ./processors/ ./delivery/ ;;
	dynamodb) bench dynamodb -bench . -benchtime 20x ./stores/dynamodb/ ;;
	mqtt) bench mqtt -bench . -benchtime 20000x ./receivers/mqtt/ ;;
	e2e) bench e2e -bench EndToEnd -benchtime 20000x ./bridge/ ;;
	scaleout) bench scaleout -bench ScaleOut -benchtime 1x -timeout 30m ./e2e/ ;;
	esac
done
echo "bench.sh: done; full output in $log"
