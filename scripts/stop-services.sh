#!/usr/bin/env bash
# stop-services.sh — stop the servers started by test-services.sh, by recorded PID only.
# Idempotent: a missing pid file, or PIDs that are gone, are fine.
set -uo pipefail

SVC_STATE=${SVC_STATE:-${TMPDIR:-/tmp}/gobridge-services/state}
PIDS="$SVC_STATE/services.pids"
STOP_TIMEOUT=${STOP_TIMEOUT:-10}

log() { printf '[stop-services %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

if [ ! -s "$PIDS" ]; then
  log "no pid file ($PIDS): nothing to stop"
  exit 0
fi

# marker that must appear in the process command line (guards against PID reuse)
marker_for() {
  case "$1" in
    mosquitto) echo mosquitto ;;
    sqs) echo fauxqs ;;
    dynamodb) echo "DynamoDBLocal.jar\|dynalite" ;;
    *) echo "$1" ;;
  esac
}

# alive = exists and not a zombie (an orphan's zombie can linger until PID 1 reaps it)
alive() { kill -0 "$1" 2>/dev/null && [ "$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)" != Z ]; }

rc=0
while IFS='=' read -r name pid; do
  [ -n "$name" ] && [ -n "$pid" ] || continue
  if ! alive "$pid"; then
    log "$name (pid $pid) not running"
    continue
  fi
  if ! tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q -- "$(marker_for "$name")"; then
    log "pid $pid is no longer $name (PID reused?): leaving it alone"
    continue
  fi
  kill -TERM "$pid" 2>/dev/null || true
  t0=$SECONDS
  while alive "$pid" && [ $((SECONDS - t0)) -lt "$STOP_TIMEOUT" ]; do sleep 0.1; done
  if alive "$pid"; then
    log "$name (pid $pid) ignored SIGTERM for ${STOP_TIMEOUT}s: SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
    sleep 0.2
  fi
  if alive "$pid"; then
    log "$name (pid $pid) still alive"; rc=1
  else
    log "$name (pid $pid) stopped"
  fi
done <"$PIDS"

[ "$rc" = 0 ] && rm -f "$PIDS"
exit "$rc"
