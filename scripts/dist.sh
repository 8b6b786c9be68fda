#!/usr/bin/env bash
# dist.sh — build gobridge's release artifacts into dist/ (gitignored):
#   gobridge_VERSION_linux_ARCH/                  static binary, LICENSE, README.md,
#                                                 CHANGELOG.md, gobridge.yaml, gobridge.service,
#                                                 gobridge.schema.json
#   gobridge_VERSION_linux_ARCH.tar.gz            that directory, packed
#   gobridge_DEBVERSION_DEBARCH.deb               built with nfpm from deploy/nfpm.yaml
#   gobridge_VERSION_linux_ARCH.oci.tar           OCI image archive (FROM scratch), built with
#                                                 buildah from deploy/image/Containerfile
#   SHA256SUMS                                    of the archives, packages and images
#   build.env                                     VERSION, COMMIT, DATE, DEB_VERSION (for dist-check.sh)
# for ARCH in amd64, arm64 and armv7 (GOARM=7; Debian's armhf).
#
# Binaries are CGO-free (CGO_ENABLED=0), -trimpath, and stamped with -X main.version,
# main.commit and main.date. VERSION defaults to `git describe --tags --always --dirty`;
# the date is SOURCE_DATE_EPOCH when set, else the commit's time for a clean tree (the
# same commit gives the same binaries and packages), else now.
#
# Needs: Go (/usr/local/go), git, and, installed here when missing (root, apt): buildah,
# ca-certificates; nfpm is built with `go install` into $TOOLS_DIR once.
# Environment: VERSION, SOURCE_DATE_EPOCH, DIST (default ./dist), ARCHES (default
# "amd64 arm64 armv7"), DIST_IMAGE=0 (skip the OCI images), TOOLS_DIR.
# Network: only the Go module proxy and Debian's package mirror.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$PWD
export PATH=/usr/local/go/bin:$PATH

DIST=${DIST:-$ROOT/dist}
ARCHES=${ARCHES:-amd64 arm64 armv7}
DIST_IMAGE=${DIST_IMAGE:-1}
NFPM_VERSION=v2.45.2
TOOLS_DIR=${TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/gobridge/tools}
NFPM=$TOOLS_DIR/nfpm-$NFPM_VERSION/nfpm
START=$SECONDS

log() { printf '[dist %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

APT_UPDATED=0
apt_install() {
  [ "$(id -u)" = 0 ] || die "need root to apt-get install $* (or install it yourself)"
  if [ "$APT_UPDATED" = 0 ]; then log "apt-get update"; apt-get update -qq; APT_UPDATED=1; fi
  log "apt-get install $*"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

# debver turns a git-describe version into a Debian version: v1.2.3 -> 1.2.3,
# v1.2.3-rc.1 -> 1.2.3~rc.1, v1.2.3-4-gabc1234 -> 1.2.3+4.gabc1234, a bare commit
# abc1234 -> 0.0.0~gitabc1234 (sorts before any release); -dirty -> +dirty.
debver() {
  local v=${1#v}
  [[ $v =~ ^[0-9]+\.[0-9]+ ]] || v="0.0.0~git$v"
  v=$(sed -E 's/-([0-9]+)-g([0-9a-f]+)/+\1.g\2/; s/-dirty$/+dirty/' <<<"$v")
  if [[ $v == *+*+* ]]; then v=${v%+dirty}.dirty; fi
  v=${v//-/\~}
  [[ $v =~ ^[0-9][A-Za-z0-9.+~]*$ ]] || die "cannot make a Debian version of $1 (got $v)"
  printf '%s' "$v"
}

# ---------------------------------------------------------------- version
command -v go >/dev/null || die "go is not installed at /usr/local/go"
VERSION=${VERSION:-$(git describe --tags --always --dirty 2>/dev/null || echo devel)}
COMMIT=${COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}
if [ -z "${SOURCE_DATE_EPOCH:-}" ]; then
  if git diff --quiet HEAD 2>/dev/null; then
    SOURCE_DATE_EPOCH=$(git log -1 --format=%ct)
  else
    SOURCE_DATE_EPOCH=$(date +%s)
  fi
fi
export SOURCE_DATE_EPOCH
DATE=$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y-%m-%dT%H:%M:%SZ)
FILE_VERSION=${VERSION#v}
[[ $FILE_VERSION =~ ^[A-Za-z0-9._+~-]+$ ]] || die "VERSION $VERSION has characters unfit for a file name"
DEB_VERSION=$(debver "$VERSION")
log "version $VERSION (deb $DEB_VERSION), commit $COMMIT, date $DATE"

# ---------------------------------------------------------------- tools
if [ ! -x "$NFPM" ]; then
  log "go install nfpm $NFPM_VERSION into $TOOLS_DIR"
  GOBIN=$(dirname "$NFPM") GOFLAGS=-trimpath CGO_ENABLED=0 \
    go install "github.com/goreleaser/nfpm/v2/cmd/nfpm@$NFPM_VERSION"
fi
CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt
if [ "$DIST_IMAGE" != 0 ]; then
  command -v buildah >/dev/null 2>&1 || apt_install buildah
  [ -s "$CA_BUNDLE" ] || apt_install ca-certificates
fi

# ---------------------------------------------------------------- build
rm -rf "$DIST"
mkdir -p "$DIST"
WORK=$DIST/.work
mkdir -p "$WORK"
BUILDAH=(buildah --root "$WORK/containers/storage" --runroot "$WORK/containers/run" --storage-driver vfs)
cleanup() {
  if [ -d "$WORK/containers/storage" ]; then "${BUILDAH[@]}" rmi --all --force >/dev/null 2>&1 || true; fi
  rm -rf "$WORK"
}
trap cleanup EXIT

# The default config, with its schema line pointing where each artifact has the schema.
# shellcheck disable=SC2016 # $schema is literal text
sed '1s|^# yaml-language-server: \$schema=.*|# yaml-language-server: $schema=/usr/share/gobridge/gobridge.schema.json|' \
  blueprints/packaged.yaml >"$WORK/gobridge.yaml.deb"
# shellcheck disable=SC2016
sed '1s|^# yaml-language-server: \$schema=.*|# yaml-language-server: $schema=gobridge.schema.json|' \
  blueprints/packaged.yaml >"$WORK/gobridge.yaml.tar"

LDFLAGS="-s -w -X main.version=$VERSION -X main.commit=$COMMIT -X main.date=$DATE"
for arch in $ARCHES; do
  case $arch in
    amd64) goarch=amd64 goarm="" nfpm_arch=amd64 deb_arch=amd64 platform=linux/amd64 ;;
    arm64) goarch=arm64 goarm="" nfpm_arch=arm64 deb_arch=arm64 platform=linux/arm64 ;;
    armv7) goarch=arm goarm=7 nfpm_arch=arm7 deb_arch=armhf platform=linux/arm/v7 ;;
    *) die "unknown architecture $arch (amd64, arm64, armv7)" ;;
  esac
  name=gobridge_${FILE_VERSION}_linux_$arch
  dir=$DIST/$name
  mkdir -p "$dir"

  t=$SECONDS
  CGO_ENABLED=0 GOOS=linux GOARCH=$goarch GOARM=$goarm \
    go build -trimpath -buildvcs=false -ldflags "$LDFLAGS" -o "$dir/gobridge" ./cmd/gobridge
  log "$arch: binary built in $((SECONDS - t))s ($(du -h "$dir/gobridge" | cut -f1))"

  install -m 0644 LICENSE README.md CHANGELOG.md deploy/systemd/gobridge.service \
    schema/gobridge.schema.json "$dir/"
  install -m 0644 "$WORK/gobridge.yaml.tar" "$dir/gobridge.yaml"
  chmod 0755 "$dir/gobridge"
  tar --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$SOURCE_DATE_EPOCH" \
    -C "$DIST" -cf - "$name" | gzip -n -9 >"$DIST/$name.tar.gz"

  t=$SECONDS
  deb=$DIST/gobridge_${DEB_VERSION}_$deb_arch.deb
  NFPM_ARCH=$nfpm_arch DEB_VERSION=$DEB_VERSION DIST_BIN=$dir/gobridge DIST_CONF=$WORK/gobridge.yaml.deb \
    "$NFPM" package --config deploy/nfpm.yaml --packager deb --target "$deb" >/dev/null
  log "$arch: $(basename "$deb") in $((SECONDS - t))s"

  if [ "$DIST_IMAGE" != 0 ]; then
    t=$SECONDS
    ctx=$WORK/image-$arch
    mkdir -p "$ctx/rootfs/etc/ssl/certs" "$ctx/rootfs/etc/gobridge" "$ctx/rootfs/tmp" "$ctx/rootfs/var/lib" \
      "$ctx/state/gobridge"
    chmod 1777 "$ctx/rootfs/tmp"
    chmod 0700 "$ctx/state/gobridge"
    install -m 0755 "$dir/gobridge" "$ctx/rootfs/gobridge"
    install -m 0644 "$CA_BUNDLE" "$ctx/rootfs/etc/ssl/certs/ca-certificates.crt"
    install -m 0644 deploy/image/passwd deploy/image/group "$ctx/rootfs/etc/"
    install -m 0644 "$WORK/gobridge.yaml.deb" "$ctx/rootfs/etc/gobridge/gobridge.yaml"
    tag=localhost/gobridge:$FILE_VERSION-$arch
    "${BUILDAH[@]}" bud --quiet --isolation chroot --platform "$platform" --timestamp "$SOURCE_DATE_EPOCH" \
      --label org.opencontainers.image.title=gobridge \
      --label "org.opencontainers.image.description=MQTT to SQS and HTTP message bridge with a durable outbox" \
      --label org.opencontainers.image.source=https://github.com/gobridge/gobridge \
      --label org.opencontainers.image.licenses=Apache-2.0 \
      --label "org.opencontainers.image.version=$VERSION" \
      --label "org.opencontainers.image.revision=$COMMIT" \
      --label "org.opencontainers.image.created=$DATE" \
      -f deploy/image/Containerfile -t "$tag" "$ctx" >/dev/null
    # Push to an OCI layout and pack it ourselves, like the tarballs, so that one commit
    # gives byte-identical archives (buildah's own oci-archive stamps the time of packing).
    "${BUILDAH[@]}" push --quiet --format oci "$tag" "oci:$WORK/oci-$arch:gobridge:$FILE_VERSION" >/dev/null
    tar --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$SOURCE_DATE_EPOCH" \
      -C "$WORK/oci-$arch" -cf "$DIST/$name.oci.tar" oci-layout index.json blobs
    log "$arch: $name.oci.tar in $((SECONDS - t))s"
  fi
done

(cd "$DIST" && shopt -s nullglob && sha256sum -- *.tar.gz *.deb *.oci.tar >SHA256SUMS)
printf 'VERSION=%q\nCOMMIT=%q\nDATE=%q\nDEB_VERSION=%q\n' "$VERSION" "$COMMIT" "$DATE" "$DEB_VERSION" >"$DIST/build.env"
log "done in $((SECONDS - START))s:"
(cd "$DIST" && ls -l -- *.tar.gz *.deb *.oci.tar SHA256SUMS 2>/dev/null) >&2
