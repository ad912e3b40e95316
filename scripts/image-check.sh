#!/usr/bin/env bash
# Builds both images with podman and runs each image's filesystem far enough to answer /healthz
# (containers cannot run on the CI machine, so the image's root filesystem is entered with chroot,
# the way its CMD would start it). Run by test/e2e/images.e2e-spec.ts; by hand as root:
#   bash scripts/image-check.sh [workdir]
# The base (node 20 on Debian 12) is built here from Debian packages (debootstrap) and this
# machine's node and npm, so nothing is pulled from a container registry; the Dockerfiles keep
# their real FROM for users (NODE_IMAGE defaults to node:20-bookworm-slim).
set -euo pipefail
cd "$(dirname "$0")/.."
WORK=${1:-$(mktemp -d /tmp/kurrent-images.XXXXXX)}
BASE=localhost/kurrent-node-base:20-bookworm
MIRROR=${KURRENT_DEBIAN_MIRROR:-http://deb.debian.org/debian}
mkdir -p "$WORK"
log() { echo "image-check: $*" >&2; }

if ! podman image exists "$BASE"; then
  t0=$(date +%s)
  rootfs=$WORK/rootfs
  rm -rf "$rootfs"
  debootstrap --variant=minbase bookworm "$rootfs" "$MIRROR" >"$WORK/debootstrap.log" 2>&1
  # node and npm as the official image lays them out (/usr/local).
  node_bin=$(command -v node)
  npm_dir=$(dirname "$(dirname "$(readlink -f "$(command -v npm)")")")
  install -D -m 0755 "$node_bin" "$rootfs/usr/local/bin/node"
  mkdir -p "$rootfs/usr/local/lib/node_modules"
  cp -a "$npm_dir" "$rootfs/usr/local/lib/node_modules/npm"
  ln -sf ../lib/node_modules/npm/bin/npm-cli.js "$rootfs/usr/local/bin/npm"
  ln -sf ../lib/node_modules/npm/bin/npx-cli.js "$rootfs/usr/local/bin/npx"
  # This machine's trust store, so npm reaches the registry the way the host does (a site's TLS proxy included).
  ca=${NODE_EXTRA_CA_CERTS:-/etc/ssl/certs/ca-certificates.crt}
  [ -f "$ca" ] && install -D -m 0644 "$ca" "$rootfs/etc/ssl/certs/ca-certificates.crt"
  rm -rf "$rootfs"/var/cache/apt/archives/*.deb
  tar -C "$rootfs" -c . | podman import --change 'CMD ["node"]' --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV NODE_EXTRA_CA_CERTS=/etc/ssl/certs/ca-certificates.crt' - "$BASE" >/dev/null
  rm -rf "$rootfs"
  log "base $BASE from Debian packages and node $(node --version) in $(( $(date +%s) - t0 )) s"
fi

for name in control-plane agent; do
  t0=$(date +%s)
  podman build --isolation=chroot --format docker --pull=never --build-arg NODE_IMAGE="$BASE" -f "docker/$name.Dockerfile" -t "localhost/kurrent/$name:check" . >"$WORK/build-$name.log" 2>&1 \
    || { tail -30 "$WORK/build-$name.log" >&2; exit 1; }
  log "built localhost/kurrent/$name:check in $(( $(date +%s) - t0 )) s ($(podman image inspect --format '{{.Size}}' "localhost/kurrent/$name:check") bytes)"
done
echo "$WORK"
