#!/usr/bin/env bash
# npm run build:kernel-node [-- KERNEL...] — the storage-node guest's boot files, for each kernel:
#   build/kernel-node/<kver>/vmlinuz         the Debian kernel, unmodified
#   build/kernel-node/<kver>/initramfs.gz    busybox-static + the modules below + kernel-node/init
#   build/kernel-node/tlshd/tlshd            ktls-utils' TLS handshake daemon (vendor/), once
# KERNEL is a Debian package version suffix: 6.12 (default: linux-image-6.12.117+deb12-amd64, the
# first kernel with LIO, nvmet, DH-HMAC-CHAP and NVMe/TCP TLS together in Debian 12) or 6.1
# (Debian 12's own kernel, which lacks target DH-HMAC-CHAP and TLS; the feature-detection test).
# Packages come by `apt-get download` into build/kernel-node/cache/ (keyed by version, never
# fetched again); nothing is installed on the host. Each step is skipped when its inputs' digest
# matches the last build's.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${KURRENT_KERNEL_NODE_BUILD:-$root/build/kernel-node}
cache=$out/cache
mkdir -p "$cache"

# Modules the guests load (dependencies are added from each module's .modinfo; those built into a
# kernel, virtio_pci in 6.12 for one, are skipped).
# crc32c first: libcrc32c (btrfs) and iSCSI logins need the algorithm, which is only a soft dependency.
MODULES=(crc32c_generic crc32c-intel virtio_pci virtio_net virtio_blk 9pnet_virtio 9p overlay ext4 btrfs configfs
  target_core_mod target_core_file iscsi_target_mod
  nvmet nvmet-tcp nvme-tcp nvme-fabrics nvme-auth nvme-keyring tls
  # kTLS ciphers of the TLS 1.3 suites tlshd negotiates (the kernel does the record layer).
  gcm ghash-generic aesni-intel ccm chacha20poly1305 seqiv)

# The .deb of PKG, downloaded once (file name carries the version).
fetch() {
  local pkg=$1 ver deb
  ver=$(apt-cache policy "$pkg" 2>/dev/null | awk '/Candidate:/ {print $2}')
  if [ -z "$ver" ] || [ "$ver" = "(none)" ]; then
    # apt-cache knows nothing before `apt-get update` on a fresh machine.
    apt-get update -qq >/dev/null 2>&1 || true
    ver=$(apt-cache policy "$pkg" 2>/dev/null | awk '/Candidate:/ {print $2}')
  fi
  [ -n "$ver" ] && [ "$ver" != "(none)" ] || { echo "build:kernel-node: Debian has no package $pkg" >&2; exit 2; }
  deb=$(ls "$cache/${pkg}_${ver//:/%3a}_"*.deb 2>/dev/null | head -1 || true)
  if [ -z "$deb" ]; then
    (cd "$cache" && apt-get download -qq "$pkg=$ver" >/dev/null 2>&1) || { echo "build:kernel-node: apt-get download $pkg=$ver failed" >&2; exit 2; }
    deb=$(ls "$cache/${pkg}_${ver//:/%3a}_"*.deb | head -1)
  fi
  echo "$deb"
}

kernel_package() {
  case "$1" in
    6.12) echo linux-image-6.12.117+deb12-amd64 ;;
    # Debian 12's default kernel, whatever its ABI number is today.
    6.1) apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-6\.1/ {print $2; exit}' ;;
    linux-image-*) echo "$1" ;;
    *) echo "build:kernel-node: unknown kernel $1 (6.12, 6.1 or a linux-image-* package)" >&2; exit 2 ;;
  esac
}

build_tlshd() {
  local tarball=$root/vendor/ktls-utils-1.4.0.tar.xz dir=$out/tlshd inputs
  inputs=$( { sha256sum "$tarball" | cut -d" " -f1; gcc --version | head -1; } | sha256sum | cut -d" " -f1)
  if [ -x "$dir/tlshd" ] && [ "$(cat "$dir/inputs.sha256" 2>/dev/null)" = "$inputs" ]; then return; fi
  rm -rf "$dir" && mkdir -p "$dir/src"
  tar -xJf "$tarball" -C "$dir/src"
  (cd "$dir/src/ktls-utils-1.4.0" && ./autogen.sh >/dev/null 2>&1 && ./configure -q >/dev/null && make -s -j"$(nproc)" >/dev/null 2>&1) \
    || { echo "build:kernel-node: building tlshd failed (needs libgnutls28-dev libkeyutils-dev libglib2.0-dev libnl-3-dev libnl-genl-3-dev autoconf automake libtool pkg-config)" >&2; exit 2; }
  cp "$dir/src/ktls-utils-1.4.0/src/tlshd/tlshd" "$dir/tlshd"
  rm -rf "$dir/src"
  echo "$inputs" > "$dir/inputs.sha256"
  echo "build:kernel-node: built $dir/tlshd"
}

build_kernel() {
  local pkg kdeb bdeb kver dir inputs work mods
  pkg=$(kernel_package "$1")
  [ -n "$pkg" ] || { echo "build:kernel-node: no Debian 6.1 kernel package found" >&2; exit 2; }
  kdeb=$(fetch "$pkg")
  bdeb=$(fetch busybox-static)
  kver=${pkg#linux-image-}
  kver=${kver%-unsigned}
  dir=$out/$1
  inputs=$( { sha256sum "$kdeb" "$bdeb" "$0" "$root/kernel-node/init" | cut -d' ' -f1; echo "${MODULES[*]}"; } | sha256sum | cut -d' ' -f1)
  if [ -f "$dir/initramfs.gz" ] && [ "$(cat "$dir/inputs.sha256" 2>/dev/null)" = "$inputs" ]; then
    echo "build:kernel-node: $1 up to date ($dir, kernel $kver)"
    return
  fi
  work=$(mktemp -d)
  trap 'rm -rf "$work"' RETURN
  dpkg-deb -x "$kdeb" "$work/k"
  dpkg-deb -x "$bdeb" "$work/bb"
  mods=$work/k/lib/modules/$kver
  [ -d "$mods" ] || mods=$(ls -d "$work"/k/lib/modules/* | head -1)
  kver=$(basename "$mods")
  mkdir -p "$work/rd"/{bin,dev,proc,sys,tmp,mnt,lib/modules} "$dir"
  cp "$work/bb/bin/busybox" "$work/rd/bin/busybox"
  cp "$root/kernel-node/init" "$work/rd/init"
  chmod 755 "$work/rd/init"
  # Decompress every module once (busybox insmod reads plain .ko) and index names -> paths.
  find "$mods" -name '*.ko*' > "$work/all"
  declare -A path=()
  while read -r f; do
    local n; n=$(basename "$f"); n=${n%%.ko*}
    path[${n//-/_}]=$f
  done < "$work/all"
  # Depth-first over depends= so every module comes after what it needs.
  declare -A seen=()
  : > "$work/rd/modules.order"
  add() {
    local n=${1//-/_} f deps d
    [ -n "${seen[$n]:-}" ] && return
    seen[$n]=1
    f=${path[$n]:-}
    # Built into this kernel (or not there at all: the init reports a missing feature itself).
    [ -n "$f" ] || return 0
    case "$f" in
      *.xz) xz -dc "$f" > "$work/rd/lib/modules/$n.ko" ;;
      *.zst) zstd -qdc "$f" > "$work/rd/lib/modules/$n.ko" ;;
      *) cp "$f" "$work/rd/lib/modules/$n.ko" ;;
    esac
    deps=$(strings "$work/rd/lib/modules/$n.ko" | sed -n 's/^depends=//p' | head -1)
    for d in ${deps//,/ }; do add "$d"; done
    echo "$n" >> "$work/rd/modules.order"
  }
  for m in "${MODULES[@]}"; do add "$m"; done
  cp "$work"/k/boot/vmlinuz-* "$dir/vmlinuz"
  (cd "$work/rd" && find . | cpio -o -H newc --quiet | gzip -1 > "$dir/initramfs.gz")
  echo "$kver" > "$dir/kernel-version"
  echo "$inputs" > "$dir/inputs.sha256"
  echo "build:kernel-node: built $dir (kernel $kver, $(wc -l < "$work/rd/modules.order") modules)"
}

kernels=("$@")
[ ${#kernels[@]} -gt 0 ] || kernels=(6.12)
build_tlshd
for k in "${kernels[@]}"; do build_kernel "$k"; done
