#!/usr/bin/env bash
# Installs the Debian packages the tests run for real (dnsmasq, ip netns, tgtd, btrfs, nvme-cli,
# qemu with Debian's iPXE ROM, OVMF and the iPXE build tools, Chromium for the UI, PostgreSQL; wrk for the benches)
# when they are missing. Runs as `pretest`, so `npm test` works on a fresh machine (as root).
set -euo pipefail
need=()
command -v dnsmasq >/dev/null 2>&1 || need+=(dnsmasq-base)
command -v ip >/dev/null 2>&1 || need+=(iproute2)
command -v wrk >/dev/null 2>&1 || need+=(wrk)
command -v pkill >/dev/null 2>&1 || need+=(procps)
command -v tgtd >/dev/null 2>&1 || need+=(tgt)
# A userspace iSCSI initiator that holds a real session on tgtd (boot sessions: the disk login).
command -v iscsi-perf >/dev/null 2>&1 || need+=(libiscsi-bin)
command -v mkfs.btrfs >/dev/null 2>&1 || need+=(btrfs-progs)
command -v mkfs.ext4 >/dev/null 2>&1 || need+=(e2fsprogs)
command -v openssl >/dev/null 2>&1 || need+=(openssl)
command -v nvme >/dev/null 2>&1 || need+=(nvme-cli)
command -v qemu-system-x86_64 >/dev/null 2>&1 || need+=(qemu-system-x86)
[ -f /usr/lib/ipxe/qemu/pxe-e1000.rom ] || need+=(ipxe-qemu)
# Kurrent's own iPXE (npm run build:ipxe) and its UEFI test VM.
[ -f /usr/share/OVMF/OVMF_CODE_4M.fd ] || need+=(ovmf)
command -v mcopy >/dev/null 2>&1 || need+=(mtools)
command -v mkfs.vfat >/dev/null 2>&1 || need+=(dosfstools)
command -v gcc >/dev/null 2>&1 || need+=(gcc)
command -v make >/dev/null 2>&1 || need+=(make)
command -v perl >/dev/null 2>&1 || need+=(perl)
[ -f /usr/include/lzma.h ] || need+=(liblzma-dev)
# The storage-node guest (kernel-node/build.sh, scripts/kernel-node.ts): the kernel and busybox come
# by apt-get download; tlshd is built from vendor/; keyctl and xxd run inside the guests.
command -v keyctl >/dev/null 2>&1 || need+=(keyutils)
command -v xxd >/dev/null 2>&1 || need+=(xxd)
command -v strings >/dev/null 2>&1 || need+=(binutils)
command -v cpio >/dev/null 2>&1 || need+=(cpio)
# The Linux worker master of the kernel-stage test (scripts/worker-image.ts): its GPT.
command -v sfdisk >/dev/null 2>&1 || need+=(fdisk)
command -v autoreconf >/dev/null 2>&1 || need+=(autoconf automake libtool)
command -v pkg-config >/dev/null 2>&1 || need+=(pkg-config)
[ -f /usr/include/gnutls/gnutls.h ] || need+=(libgnutls28-dev)
[ -f /usr/include/keyutils.h ] || need+=(libkeyutils-dev)
[ -f /usr/include/glib-2.0/glib.h ] || need+=(libglib2.0-dev)
[ -f /usr/include/libnl3/netlink/netlink.h ] || need+=(libnl-3-dev)
[ -f /usr/include/libnl3/netlink/genl/genl.h ] || need+=(libnl-genl-3-dev)
# The web UI tests (playwright-core drives Debian's Chromium).
[ -x /usr/bin/chromium ] || need+=(chromium)
# The image test builds both Dockerfiles with podman on a base made by debootstrap.
command -v podman >/dev/null 2>&1 || need+=(podman)
command -v debootstrap >/dev/null 2>&1 || need+=(debootstrap)
# Debian's docker-compose 1.29 resolves the compose files in a unit test (config: no daemon).
command -v docker-compose >/dev/null 2>&1 || need+=(docker-compose)
command -v podman-compose >/dev/null 2>&1 || need+=(podman-compose)
# The production-install test verifies the systemd units (systemd-analyze verify).
command -v systemd-analyze >/dev/null 2>&1 || need+=(systemd)
# The PostgreSQL store's tests run their own cluster (initdb + pg_ctl as the postgres user).
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || need+=(postgresql)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "system-deps: missing ${need[*]}; run as root or: apt-get install -y ${need[*]}" >&2
    exit 1
  fi
  echo "system-deps: installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
