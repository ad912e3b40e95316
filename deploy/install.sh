#!/bin/sh
# Installs a built checkout as system services (README, "Production install"):
#   npm ci && npm run build && sudo deploy/install.sh            # control plane
#   npm ci && npm run build && sudo deploy/install.sh --agent    # storage agent (on a storage node)
# --root DIR stages everything under DIR instead of / (packaging, tests): no user is created and
# systemd is not told. Run it again to upgrade: code and units are replaced, /etc/kurrent and
# /var/lib/kurrent* are kept.
#
# Layout: /opt/kurrent (code, production node_modules, web UI, iPXE scripts), /etc/kurrent/*.env
# (settings, 0640 root:kurrent, never overwritten), /var/lib/kurrent (control plane: config/,
# state/, dnsmasq/; owner kurrent), /var/lib/kurrent-agent and DISK_DIR (agent, root),
# /etc/systemd/system/kurrent-*, /usr/local/bin/kurrent (the CLI).
set -eu

ROOT=
ROLE=control-plane
while [ $# -gt 0 ]; do
  case "$1" in
    --agent) ROLE=agent ;;
    --root) ROOT=$2; shift ;;
    *) echo "usage: $0 [--agent] [--root DIR]" >&2; exit 2 ;;
  esac
  shift
done

SRC=$(cd "$(dirname "$0")/.." && pwd)
NODE=$(command -v node) || { echo "node not found: install Node.js 20 first" >&2; exit 1; }
[ -f "$SRC/dist/src/control-plane/start.js" ] && [ -f "$SRC/dist/scripts/wait-healthy.js" ] || { echo "not built: run npm ci && npm run build in $SRC first" >&2; exit 1; }

APP=$ROOT/opt/kurrent
NEW=$APP.new.$$
rm -rf "$NEW"
mkdir -p "$NEW/node_modules" "$NEW/docker" "$NEW/web"
cp -a "$SRC/dist" "$SRC/bin" "$SRC/package.json" "$SRC/README.md" "$SRC/LICENSE" "$SRC/NOTICE" "$SRC/THIRD_PARTY.md" "$NEW/"
cp -a "$SRC/docker/tftp" "$NEW/docker/"
[ -d "$SRC/web/dist" ] && cp -a "$SRC/web/dist" "$NEW/web/"
# Production dependencies only, as npm resolved them (no network, no dev tools).
(cd "$SRC" && npm ls --omit=dev --all --parseable 2>/dev/null | tail -n +2) | while read -r dir; do
  rel=${dir#"$SRC/"}
  mkdir -p "$NEW/$(dirname "$rel")"
  [ -e "$NEW/$rel" ] || cp -a "$dir" "$NEW/$rel"
done
# Swap in one step: a failed copy leaves the old version running.
if [ -d "$APP" ]; then mv "$APP" "$APP.old.$$"; fi
mv "$NEW" "$APP"
rm -rf "$APP.old.$$"

UNITS=$ROOT/etc/systemd/system
mkdir -p "$UNITS" "$ROOT/etc/kurrent"
if [ "$ROLE" = agent ]; then set -- kurrent-agent.service; else set -- kurrent-control-plane.service kurrent-dnsmasq-reload.path kurrent-dnsmasq-reload.service; fi
for u in "$@"; do sed "s|@NODE@|$NODE|g" "$SRC/deploy/systemd/$u" > "$UNITS/$u"; done
ENVFILE=$ROOT/etc/kurrent/$ROLE.env
[ -f "$ENVFILE" ] || install -m 0640 "$SRC/deploy/systemd/$ROLE.env" "$ENVFILE"
if [ "$ROLE" = control-plane ]; then
  # The CLI as a command (node runs the compiled build directly: no npx resolution on each call).
  mkdir -p "$ROOT/usr/local/bin"
  ln -sfn /opt/kurrent/bin/kurrent.js "$ROOT/usr/local/bin/kurrent"
  mkdir -p "$ROOT/etc/dnsmasq.d"
  [ -f "$ROOT/etc/dnsmasq.d/kurrent.conf" ] || install -m 0644 "$SRC/deploy/dnsmasq-kurrent.conf" "$ROOT/etc/dnsmasq.d/kurrent.conf"
else
  mkdir -p "$ROOT/srv/kurrent/images"
fi

if [ -z "$ROOT" ]; then
  if [ "$ROLE" = control-plane ]; then
    getent passwd kurrent >/dev/null || useradd --system --home-dir /var/lib/kurrent --shell /usr/sbin/nologin kurrent
    chgrp kurrent "$ENVFILE"
    # dnsmasq re-reads the host list as its own user after a reload: let it read kurrent's files.
    if getent passwd dnsmasq >/dev/null; then usermod -a -G kurrent dnsmasq; fi
  fi
  if [ -d /run/systemd/system ]; then systemctl daemon-reload; fi
fi
echo "installed the $ROLE in $APP; settings: $ENVFILE"
if [ "$ROLE" = agent ]; then
  echo "next: edit $ENVFILE, then: systemctl enable --now kurrent-agent"
else
  echo "next: edit $ENVFILE and /etc/dnsmasq.d/kurrent.conf, then: systemctl enable --now kurrent-control-plane kurrent-dnsmasq-reload.path"
fi
