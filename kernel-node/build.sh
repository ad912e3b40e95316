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

# fetch, kernel_package, collect_modules
source "$root/kernel-node/lib.sh"

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
  inputs=$( { sha256sum "$kdeb" "$bdeb" "$0" "$root/kernel-node/lib.sh" "$root/kernel-node/init" | cut -d' ' -f1; echo "${MODULES[*]}"; } | sha256sum | cut -d' ' -f1)
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
  collect_modules "$mods" "$work/rd" "${MODULES[@]}"
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
