#!/usr/bin/env bash
# dist-check.sh — prove that what scripts/dist.sh builds installs and runs, on this
# machine, as an operator would use it. CI (.ci/run) runs it after the tests. Needs root
# (dpkg -i, apt-get); never starts systemd units (no systemd as PID 1 here).
#
#   1. bash scripts/dist.sh (skip with DIST_CHECK_BUILD=0 to check an existing dist/)
#   2. SHA256SUMS; each binary static (no ELF interpreter) and stamped with the version;
#      the arm64 and armv7 binaries run `version` and `check` under qemu-user-static
#   3. the tarball: its files, and its binary checks its own gobridge.yaml
#   4. the amd64 .deb: dpkg -i; `gobridge --version`, `gobridge check`; the user, the file
#      modes; `systemd-analyze verify` and `security --offline` of the unit; the installed
#      command run as the gobridge user with no privileges (NoNewPrivileges, empty
#      capability set): /readyz, gobridge_build_info on /metrics, a QoS 1 message through
#      the outbox to stdout, SIGHUP reloads the config in the same process (one more
#      message through after it), SIGTERM exits 0; the metric names
#      used by deploy/ exist; reinstall keeps an edited config; dpkg -r keeps config and
#      data; dpkg --purge removes them
#   5. each OCI image: loaded by podman; config (numeric non-root user, entrypoint, cmd,
#      volume, platform); its files (no shell); the amd64 image's own binary, chrooted into
#      the image's root as its user, checks the image's config
#   6. deploy/: promtool check rules + test rules; the Grafana dashboard's JSON and the
#      PromQL of every panel
# Tools come from Debian (apt-get, when missing): systemd, prometheus (promtool), skopeo,
# umoci, podman, qemu-user-static, jq, curl, mosquitto-clients.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$PWD
export PATH=/usr/local/go/bin:$PATH
DIST=$ROOT/dist
START=$SECONDS
STEP_START=$SECONDS

STEPS=0 # steps passed; the closing line counts them
log() { printf '[dist-check %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "FAIL: $*"; echo "dist-check: $STEPS passed, 1 failed"; exit 1; }
step() {
  if [ -n "${STEP_NAME:-}" ]; then
    log "ok: ${STEP_NAME:-} ($((SECONDS - STEP_START))s)"
    STEPS=$((STEPS + 1))
  fi
  STEP_NAME=$*
  STEP_START=$SECONDS
  [ "$*" = "done" ] || log "--- $*"
}
[ "$(id -u)" = 0 ] || die "run as root (dpkg -i, apt-get)"

TMP=$(mktemp -d /tmp/gobridge-dist-check.XXXXXX)
BRIDGE_PID=""
INSTALLED=0 # this script installed the package: purge it on the way out
ASIDE="" # a /var/lib/gobridge that was here before (not the package's), moved aside meanwhile
cleanup() {
  if [ -n "$BRIDGE_PID" ] && kill -0 "$BRIDGE_PID" 2>/dev/null; then kill -KILL "$BRIDGE_PID" || true; fi
  if [ "$INSTALLED" = 1 ]; then dpkg --purge gobridge >/dev/null 2>&1 || true; fi
  if [ -n "$ASIDE" ] && [ ! -e /var/lib/gobridge ]; then mv "$ASIDE" /var/lib/gobridge; fi
  rm -rf "$TMP"
}
trap cleanup EXIT

# ---------------------------------------------------------------- tools
step "tools"
need=()
command -v systemd-analyze >/dev/null || need+=(systemd)
command -v promtool >/dev/null || need+=(prometheus)
command -v skopeo >/dev/null || need+=(skopeo)
command -v umoci >/dev/null || need+=(umoci)
command -v podman >/dev/null || need+=(podman)
command -v qemu-aarch64-static >/dev/null || need+=(qemu-user-static)
command -v jq >/dev/null || need+=(jq)
command -v curl >/dev/null || need+=(curl)
command -v mosquitto_pub >/dev/null || need+=(mosquitto-clients)
command -v readelf >/dev/null || need+=(binutils)
if [ ${#need[@]} -gt 0 ]; then
  log "apt-get install ${need[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

# ---------------------------------------------------------------- build
if [ "${DIST_CHECK_BUILD:-1}" != 0 ]; then
  step "bash scripts/dist.sh"
  bash scripts/dist.sh
fi
[ -f "$DIST/build.env" ] || die "no dist/build.env: run scripts/dist.sh"
# shellcheck disable=SC1091
. "$DIST/build.env" # VERSION, COMMIT, DATE, DEB_VERSION of what dist.sh built
FV=${VERSION#v}
for arch in amd64 arm64 armv7; do
  [ -f "$DIST/gobridge_${FV}_linux_$arch.tar.gz" ] || die "dist/ has no $arch tarball for version $VERSION"
done

# ---------------------------------------------------------------- binaries
step "checksums and binaries"
(cd "$DIST" && sha256sum --quiet -c SHA256SUMS) || die "SHA256SUMS does not match"
[ "$(wc -l <"$DIST/SHA256SUMS")" = 9 ] || die "SHA256SUMS lists $(wc -l <"$DIST/SHA256SUMS") files, want 9"
conf=$DIST/gobridge_${FV}_linux_amd64/gobridge.yaml
for arch in amd64 arm64 armv7; do
  bin=$DIST/gobridge_${FV}_linux_$arch/gobridge
  if readelf -l "$bin" | grep -q INTERP; then die "$arch binary is dynamically linked"; fi
  case $arch in
    amd64) run=() machine="X86-64" platform=linux/amd64 ;;
    arm64) run=(qemu-aarch64-static) machine="AArch64" platform=linux/arm64 ;;
    armv7) run=(qemu-arm-static) machine="ARM" platform=linux/arm ;;
  esac
  readelf -h "$bin" | grep -q "Machine: *.*$machine" || die "$arch binary: ELF machine is not $machine"
  out=$("${run[@]}" "$bin" version)
  [ "$out" = "gobridge $VERSION (commit $COMMIT, built $DATE) $(go env GOVERSION) $platform" ] || die "$arch version: $out"
  "${run[@]}" "$bin" check -c "$conf" 2>/dev/null || die "$arch binary rejects the default config"
  log "$arch: static, ${run[*]:-native}: $out"
done
if readelf -A "$DIST/gobridge_${FV}_linux_armv7/gobridge" 2>/dev/null | grep -q "Tag_CPU_arch: v7"; then
  log "armv7: ELF attributes say ARMv7"
fi

# ---------------------------------------------------------------- tarball
step "tarball"
tar -tzf "$DIST/gobridge_${FV}_linux_amd64.tar.gz" | sort >"$TMP/tar.list"
for f in gobridge LICENSE README.md CHANGELOG.md gobridge.yaml gobridge.service gobridge.schema.json; do
  grep -qx "gobridge_${FV}_linux_amd64/$f" "$TMP/tar.list" || die "tarball lacks $f"
done
tar -xzf "$DIST/gobridge_${FV}_linux_amd64.tar.gz" -C "$TMP"
(cd "$TMP/gobridge_${FV}_linux_amd64" && ./gobridge check -c gobridge.yaml 2>/dev/null) || die "tarball config fails check"

# ---------------------------------------------------------------- .deb
step ".deb: install"
deb=$(ls "$DIST"/gobridge_*_amd64.deb)
dpkg-deb -f "$deb" Package Version Architecture Depends | sed 's/^/  /' >&2
dpkg-deb --ctrl-tarfile "$deb" | tar -xO ./conffiles | sort >"$TMP/conffiles"
printf '/etc/default/gobridge\n/etc/gobridge/gobridge.yaml\n' | cmp -s - "$TMP/conffiles" \
  || die "conffiles are: $(tr '\n' ' ' <"$TMP/conffiles")"
if dpkg-query -W -f '${Status}' gobridge 2>/dev/null | grep -q installed; then
  die "a gobridge package is installed on this machine; this check installs and purges its own: remove it first"
fi
# The package is checked as on a fresh machine: postinst keeps a state
# directory an administrator made, so one left here by something else
# (a root process that opened /var/lib/gobridge/outbox.db) waits aside.
if [ -e /var/lib/gobridge ]; then
  ASIDE=$(mktemp -u /var/lib/gobridge.dist-check.XXXXXX)
  log "moving the existing /var/lib/gobridge ($(stat -c '%U:%G %a' /var/lib/gobridge)) aside to $ASIDE until the end"
  mv /var/lib/gobridge "$ASIDE"
fi
INSTALLED=1
dpkg -i "$deb" >"$TMP/dpkg-i.log" 2>&1 || { cat "$TMP/dpkg-i.log" >&2; die "dpkg -i failed"; }

[ "$(/usr/bin/gobridge --version)" = "$(/usr/bin/gobridge version)" ] || die "--version differs from version"
/usr/bin/gobridge --version | grep -q "^gobridge $VERSION " || die "installed version: $(/usr/bin/gobridge --version)"
/usr/bin/gobridge check -c /etc/gobridge/gobridge.yaml || die "installed config fails check"
getent passwd gobridge | grep -q ':/var/lib/gobridge:/usr/sbin/nologin$' || die "user: $(getent passwd gobridge)"
[ "$(id -u gobridge)" -lt 1000 ] || die "gobridge is not a system user (uid $(id -u gobridge))"
[ "$(stat -c '%U:%G %a' /etc/gobridge/gobridge.yaml)" = "root:gobridge 640" ] \
  || die "config: $(stat -c '%U:%G %a' /etc/gobridge/gobridge.yaml)"
[ "$(stat -c '%U:%G %a' /var/lib/gobridge)" = "gobridge:gobridge 750" ] \
  || die "state dir: $(stat -c '%U:%G %a' /var/lib/gobridge)"
[ "$(stat -c '%a' /etc/default/gobridge)" = 600 ] || die "/etc/default/gobridge is not 0600"
head -1 /etc/gobridge/gobridge.yaml | grep -q 'schema=/usr/share/gobridge/gobridge.schema.json' \
  || die "installed config's schema line: $(head -1 /etc/gobridge/gobridge.yaml)"
cmp -s /usr/share/gobridge/gobridge.schema.json schema/gobridge.schema.json || die "packaged schema differs"

step ".deb: systemd unit"
unit=/lib/systemd/system/gobridge.service
systemd-analyze verify "$unit" || die "systemd-analyze verify $unit"
systemd-analyze security --offline=true --threshold=20 "$unit" >"$TMP/security.txt" \
  || { cat "$TMP/security.txt" >&2; die "unit exposure above 2.0"; }
log "$(grep 'Overall exposure' "$TMP/security.txt")"
# shellcheck disable=SC2016 # $MAINPID is literal text
for want in 'User=gobridge' 'StateDirectory=gobridge' 'ConfigurationDirectory=gobridge' 'ProtectSystem=strict' \
  'ProtectHome=yes' 'PrivateTmp=yes' 'NoNewPrivileges=yes' 'CapabilityBoundingSet=' \
  'RestrictAddressFamilies=AF_INET AF_INET6 AF_UNIX' 'Restart=on-failure' \
  'ExecStart=/usr/bin/gobridge run -c /etc/gobridge/gobridge.yaml' 'ExecReload=/bin/kill -HUP $MAINPID'; do
  grep -qxF "$want" "$unit" || die "unit lacks $want"
done

step ".deb: run the installed service command as its user, unprivileged"
free_port() { # a loopback port nobody listens on
  local p
  while :; do
    p=$((20000 + RANDOM % 20000))
    (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null || { echo "$p"; return; }
  done
}
mqtt=$(free_port) admin=$(free_port)
cd /var/lib/gobridge # the unit's WorkingDirectory and UMask
umask 0077
setpriv --reuid gobridge --regid gobridge --init-groups --no-new-privs --bounding-set -all --inh-caps -all \
  env GOBRIDGE_MQTT_LISTEN="127.0.0.1:$mqtt" GOBRIDGE_ADMIN_LISTEN="127.0.0.1:$admin" \
  /usr/bin/gobridge run -c /etc/gobridge/gobridge.yaml >"$TMP/stdout" 2>"$TMP/stderr" &
BRIDGE_PID=$!
umask 0022
cd "$ROOT"
wait_for() { # wait_for SECONDS DESCRIPTION COMMAND...
  local deadline=$((SECONDS + $1)) what=$2
  shift 2
  until "$@" >/dev/null 2>&1; do
    kill -0 "$BRIDGE_PID" 2>/dev/null || { cat "$TMP/stderr" >&2; die "gobridge exited while waiting for $what"; }
    [ $SECONDS -lt $deadline ] || { cat "$TMP/stderr" >&2; die "timed out waiting for $what"; }
    sleep 0.2
  done
}
wait_for 30 "/readyz" curl -fsS "http://127.0.0.1:$admin/readyz"
mosquitto_pub -h 127.0.0.1 -p "$mqtt" -q 1 -i dist-check -t plant/line1 -m '{"temp": 21}'
wait_for 20 "the message on stdout" grep -q '"topic":"plant/line1"' "$TMP/stdout"
metrics_show() { curl -fsS "http://127.0.0.1:$admin/metrics" | grep -q "^$1"; }
wait_for 10 "the send on /metrics" metrics_show 'gobridge_delivery_send_seconds_count{route="everything"} 1$'
curl -fsS "http://127.0.0.1:$admin/metrics" >"$TMP/metrics"
grep -qF "gobridge_build_info{commit=\"$COMMIT\",date=\"$DATE\",goversion=\"$(go env GOVERSION)\",version=\"$VERSION\"} 1" "$TMP/metrics" \
  || die "no gobridge_build_info for $VERSION on /metrics: $(grep build_info "$TMP/metrics")"
[ "$(stat -c '%U %a' /var/lib/gobridge/outbox.db)" = "gobridge 600" ] \
  || die "outbox: $(stat -c '%U %a' /var/lib/gobridge/outbox.db)"
kill -HUP "$BRIDGE_PID" # what `systemctl reload gobridge` sends (ExecReload)
wait_for 20 "the reload on /metrics" metrics_show 'gobridge_config_reloads_total{result="ok"} 1$'
grep -q 'msg="config reloaded"' "$TMP/stderr" || die "SIGHUP: no \"config reloaded\" in the log"
mosquitto_pub -h 127.0.0.1 -p "$mqtt" -q 1 -i dist-check -t plant/line2 -m '{"temp": 22}'
wait_for 20 "a message after the reload on stdout" grep -q '"topic":"plant/line2"' "$TMP/stdout"
curl -fsS "http://127.0.0.1:$admin/readyz" >/dev/null || die "not ready after SIGHUP"
kill -TERM "$BRIDGE_PID"
status=0
wait "$BRIDGE_PID" || status=$?
BRIDGE_PID=""
[ "$status" = 0 ] || { cat "$TMP/stderr" >&2; die "gobridge exited $status after SIGTERM"; }
log "ran as $(id -u gobridge):$(id -g gobridge): ready, message delivered, SIGHUP reloaded (same process), SIGTERM -> exit 0"

# Every gobridge metric deploy/ uses must be on /metrics, but those other work is adding
# and those whose series appear at their first event (those must be in the README's table).
pending_metrics=""
lazy_metrics="gobridge_outbox_backpressure_seconds_total gobridge_sender_up gobridge_dead_letters"
grep -ohE 'gobridge_[a-z_]+' deploy/prometheus/gobridge.rules.yaml deploy/grafana/gobridge.json | sort -u >"$TMP/used"
sed -nE 's/^# TYPE (gobridge_[a-z_]+) .*/\1/p' "$TMP/metrics" | sort -u >"$TMP/exported"
while read -r m; do
  base=$(sed -E 's/_(bucket|sum|count)$//' <<<"$m")
  grep -qx "$base" "$TMP/exported" && continue
  [[ " $pending_metrics " == *" $m "* ]] && { log "metric $m: not exported yet (being added elsewhere)"; continue; }
  [[ " $lazy_metrics " == *" $m "* ]] && grep -qF "| \`$m\` |" README.md && continue
  die "deploy/ uses $m, which gobridge does not export"
done <"$TMP/used"

step ".deb: reinstall, remove, purge"
echo "# edited by the operator" >>/etc/gobridge/gobridge.yaml
dpkg -i "$deb" >"$TMP/dpkg-i2.log" 2>&1 || { cat "$TMP/dpkg-i2.log" >&2; die "reinstall failed"; }
tail -1 /etc/gobridge/gobridge.yaml | grep -q "edited by the operator" || die "reinstall replaced the edited config"
dpkg -r gobridge >/dev/null
for f in /usr/bin/gobridge /lib/systemd/system/gobridge.service /usr/share/gobridge; do
  [ ! -e "$f" ] || die "dpkg -r left $f"
done
for f in /etc/gobridge/gobridge.yaml /etc/default/gobridge /var/lib/gobridge/outbox.db; do
  [ -e "$f" ] || die "dpkg -r removed $f (config and data stay until purge)"
done
dpkg --purge gobridge >/dev/null
for f in /etc/gobridge /etc/default/gobridge /var/lib/gobridge /usr/share/doc/gobridge; do
  [ ! -e "$f" ] || die "dpkg --purge left $f"
done
! dpkg-query -W gobridge >/dev/null 2>&1 || die "dpkg still knows gobridge after purge"
INSTALLED=0
log "dpkg -r kept config and outbox; dpkg --purge removed them (the system user stays, as Debian does)"

# ---------------------------------------------------------------- images
step "OCI images"
PODMAN=(podman --root "$TMP/podman/storage" --runroot "$TMP/podman/run" --storage-driver vfs)
for arch in amd64 arm64 armv7; do
  img=$DIST/gobridge_${FV}_linux_$arch.oci.tar
  "${PODMAN[@]}" load -q -i "$img" >"$TMP/load.txt" 2>&1 || { cat "$TMP/load.txt" >&2; die "podman load $img"; }
  skopeo inspect --config "oci-archive:$img" >"$TMP/config.json"
  case $arch in
    amd64) want='"amd64" ""' ;; arm64) want='"arm64" ""' ;; armv7) want='"arm" "v7"' ;;
  esac
  jq -e --arg want "$want" '
    (.architecture|tojson) + " " + ((.variant // "")|tojson) == $want
    and .os == "linux"
    and (.config.User | test("^[1-9][0-9]*:[1-9][0-9]*$"))
    and .config.Entrypoint == ["/gobridge"]
    and .config.Cmd == ["run", "-c", "/etc/gobridge/gobridge.yaml"]
    and (.config.Volumes | has("/var/lib/gobridge"))
  ' "$TMP/config.json" >/dev/null || { jq . "$TMP/config.json" >&2; die "$arch image config"; }
  skopeo copy -q "oci-archive:$img" "oci:$TMP/oci-$arch:gobridge" >/dev/null
  umoci unpack --image "$TMP/oci-$arch:gobridge" "$TMP/bundle-$arch" >/dev/null
  rootfs=$TMP/bundle-$arch/rootfs
  (cd "$rootfs" && find . -mindepth 1 | sort) >"$TMP/files-$arch"
  printf '%s\n' ./etc ./etc/gobridge ./etc/gobridge/gobridge.yaml ./etc/group ./etc/passwd ./etc/ssl ./etc/ssl/certs \
    ./etc/ssl/certs/ca-certificates.crt ./gobridge ./tmp ./var ./var/lib ./var/lib/gobridge | cmp -s - "$TMP/files-$arch" \
    || { cat "$TMP/files-$arch" >&2; die "$arch image files"; }
  owners=$(cd "$rootfs" && stat -c '%n %u:%g %a' gobridge etc/gobridge/gobridge.yaml tmp var/lib var/lib/gobridge | tr '\n' ' ')
  [ "$owners" = "gobridge 0:0 755 etc/gobridge/gobridge.yaml 0:0 644 tmp 0:0 1777 var/lib 0:0 755 var/lib/gobridge $(jq -r .config.User "$TMP/config.json") 700 " ] \
    || die "$arch image owners and modes: $owners"
  log "$arch image: $(jq -r '.architecture + (.variant // "" | if . == "" then "" else "/" + . end) + ", user " + .config.User' "$TMP/config.json"), $(wc -l <"$TMP/files-$arch") paths, no shell"
done
"${PODMAN[@]}" images --format '{{.Repository}}:{{.Tag}}' | grep -qx "localhost/gobridge:$FV" || die "podman did not name the image gobridge:$FV"
# The amd64 image's own files, as its own user: the static binary checks the image's config.
user=$(jq -r .config.User "$TMP/config.json")
rootfs=$TMP/bundle-amd64/rootfs
chroot --userspec="$user" "$rootfs" /gobridge version | grep -q "^gobridge $VERSION " || die "image binary version"
chroot --userspec="$user" "$rootfs" /gobridge check -c /etc/gobridge/gobridge.yaml 2>/dev/null || die "image config fails check"
log "amd64 image: its binary, chrooted as $user, checks /etc/gobridge/gobridge.yaml"

# ---------------------------------------------------------------- deploy/
step "deploy/: Prometheus rules and Grafana dashboard"
promtool check rules --lint-fatal deploy/prometheus/gobridge.rules.yaml >/dev/null
(cd deploy/prometheus && promtool test rules gobridge.rules.test.yaml) >/dev/null
dash=deploy/grafana/gobridge.json
jq -e '
  .uid == "gobridge-overview"
  and ([.panels[].id] | length == (unique | length))
  and all(.panels[] | select(.type != "row"); .datasource.uid == "${datasource}" and (.targets | length > 0))
' "$dash" >/dev/null || die "dashboard structure"
# Each panel's PromQL, with Grafana's variables filled in, must parse: as recording rules.
{
  echo "groups: [{name: dashboard, rules: ["
  jq -r '[.panels[] | select(.type != "row") | .targets[].expr] | to_entries[]
    | "{record: dashboard_expr_\(.key), expr: " + (.value | gsub("\\$__rate_interval"; "5m")
      | gsub("\\$instance"; ".*") | tojson) + "},"' "$dash"
  echo "]}]"
} >"$TMP/dashboard.rules.yaml"
promtool check rules --lint-fatal "$TMP/dashboard.rules.yaml" >/dev/null || die "a dashboard expression does not parse"
log "rules: checked and unit-tested; dashboard: $(jq '[.panels[] | select(.type != "row")] | length' "$dash") panels, every query parses"

step "done"
log "dist-check passed in $((SECONDS - START))s"
echo "dist-check: $STEPS passed, 0 failed"
