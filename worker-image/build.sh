#!/usr/bin/env bash
# npm run build:worker-image — the parts of the Linux master image of the kernel-stage boot tests
# (issue 22), built from Debian packages only and cached (each step skipped while its inputs'
# digest is unchanged):
#   build/worker-image/uki.efi    a unified kernel image: systemd-boot's EFI stub + the Debian 6.12
#                                 kernel + the initramfs below + the command line; the disk's
#                                 removable-media boot file (EFI/BOOT/BOOTX64.EFI), so no boot
#                                 loader configuration exists to go wrong
#   build/worker-image/initramfs  busybox-static, open-iscsi's iscsistart, keyutils' keyctl and
#                                 tlshd (+ their libraries), the modules below and worker-image/init
#   build/worker-image/root       the root filesystem's tree: busybox and worker-image/os-init as
#                                 /sbin/init
# scripts/worker-image.ts assembles a master from them (GPT: ESP + ext4 root) with the control
# plane's URL written into the root filesystem.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${KURRENT_WORKER_IMAGE_BUILD:-$root/build/worker-image}
# Shares the kernel-node's download cache: one kernel .deb for both guests.
cache=${KURRENT_KERNEL_NODE_BUILD:-$root/build/kernel-node}/cache
mkdir -p "$cache" "$out"
# fetch, kernel_package, collect_modules
source "$root/kernel-node/lib.sh"

# e1000: the NIC qemu gives the worker (and iPXE's option ROM drives); iscsi_ibft: the table iPXE
# publishes; iscsi_tcp + sd_mod: the disk; ext4: its root. crc32c for ext4's metadata checksums.
# efivarfs + nvme-tcp (with nvme-auth, nvme-keyring and tls as dependencies): the NVMe/TCP
# hand-over (the KurrentNvmeBoot variable, DH-HMAC-CHAP, TLS 1.3 through tlshd), with the kTLS
# ciphers of the TLS 1.3 suites.
MODULES=(crc32c_generic crc32c-intel e1000 iscsi_ibft iscsi_tcp sd_mod ext4
  efivarfs nvme-tcp nvme-fabrics nvme-core nvme-auth nvme-keyring tls gcm ghash-generic aesni-intel ccm chacha20poly1305 seqiv)
PACKAGES=(busybox-static open-iscsi libopeniscsiusr systemd-boot-efi openssl libssl3 keyutils libkeyutils1 e2fsprogs libext2fs2 libcom-err2)
# tlshd (the kernel's TLS handshake upcall for nvme-tcp), built by kernel-node/build.sh from vendor/.
tlshd=${KURRENT_KERNEL_NODE_BUILD:-$root/build/kernel-node}/tlshd/tlshd
[ -x "$tlshd" ] || bash "$root/kernel-node/build.sh" >&2

kpkg=$(kernel_package 6.12)
debs=("$(fetch "$kpkg")")
for p in "${PACKAGES[@]}"; do debs+=("$(fetch "$p")"); done
inputs=$( { sha256sum "${debs[@]}" "$tlshd" "$0" "$root/kernel-node/lib.sh" "$root/worker-image/init" "$root/worker-image/kurrent-nvme.sh" "$root/worker-image/os-init" | cut -d' ' -f1; echo "${MODULES[*]}"; } | sha256sum | cut -d' ' -f1)
if [ -f "$out/uki.efi" ] && [ "$(cat "$out/inputs.sha256" 2>/dev/null)" = "$inputs" ]; then
  echo "build:worker-image: up to date ($out)"
  exit 0
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for d in "${debs[@]}"; do dpkg-deb -x "$d" "$work/x"; done
mods=$(ls -d "$work"/x/lib/modules/* | head -1)
kver=$(basename "$mods")

# The initramfs: busybox, iscsistart and the shared libraries it loads (from the host's Debian
# libc and friends, which are the same release's packages), the modules, /init.
rd=$work/rd
mkdir -p "$rd"/{bin,sbin,dev,proc,sys,run,tmp,newroot,etc/iscsi,var/lock,lib64}
cp "$work/x/bin/busybox" "$rd/bin/busybox"
cp "$work/x/sbin/iscsistart" "$rd/sbin/iscsistart"
# with_libs BINARY TREE: the shared libraries BINARY loads, into TREE/lib/x86_64-linux-gnu (the
# packages' own first, then the host's libc and friends: the same Debian release) and the loader.
with_libs() {
  mkdir -p "$2/lib/x86_64-linux-gnu" "$2/lib64"
  LD_LIBRARY_PATH="$work/x/usr/lib/x86_64-linux-gnu:$work/x/lib/x86_64-linux-gnu" ldd "$1" | awk '/=> \// {print $3}' | while read -r lib; do
    cp -L "$lib" "$2/lib/x86_64-linux-gnu/$(basename "$lib")"
  done
  cp -L /lib64/ld-linux-x86-64.so.2 "$2/lib64/"
}
with_libs "$work/x/sbin/iscsistart" "$rd"
cp "$work/x/bin/keyctl" "$rd/bin/keyctl"
with_libs "$work/x/bin/keyctl" "$rd"
# chattr: efivarfs makes every variable outside the kernel's own list immutable; the initramfs
# clears that to delete the hand-over variable.
cp "$work/x/usr/bin/chattr" "$rd/bin/chattr"
with_libs "$work/x/usr/bin/chattr" "$rd"
cp "$tlshd" "$rd/sbin/tlshd"
with_libs "$tlshd" "$rd"
cp "$root/worker-image/init" "$rd/init"
cp "$root/worker-image/kurrent-nvme.sh" "$rd/lib/kurrent-nvme.sh"
chmod 755 "$rd/init"
collect_modules "$mods" "$rd" "${MODULES[@]}"
(cd "$rd" && find . | cpio -o -H newc --quiet | gzip -9 > "$work/initramfs")

# The unified kernel image (the section layout of systemd 252's stub, as its ukify lays it out).
printf 'NAME="Kurrent worker"\nID=kurrent-worker\nVERSION_ID=%s\n' "$kver" > "$work/os-release"
# No secret and nothing per worker on this line: the disk and its credentials come from the iBFT.
printf 'console=ttyS0 quiet panic=30' > "$work/cmdline"
objcopy \
  --add-section .osrel="$work/os-release" --change-section-vma .osrel=0x20000 \
  --add-section .cmdline="$work/cmdline" --change-section-vma .cmdline=0x30000 \
  --add-section .linux="$work/x/boot/vmlinuz-$kver" --change-section-vma .linux=0x2000000 \
  --add-section .initrd="$work/initramfs" --change-section-vma .initrd=0x3000000 \
  "$work/x/usr/lib/systemd/boot/efi/linuxx64.efi.stub" "$work/uki.efi"

# The root filesystem's tree (scripts/worker-image.ts adds /etc/kurrent/controller and makes the ext4).
rm -rf "$out/root"
mkdir -p "$out/root"/{bin,sbin,dev,proc,sys,run,tmp,etc/kurrent,var/lib/kurrent}
cp "$work/x/bin/busybox" "$out/root/bin/busybox"
cp "$root/worker-image/os-init" "$out/root/sbin/init"
# openssl s_client: the OS's call to the control plane over verified TLS (busybox's TLS verifies nothing).
mkdir -p "$out/root/usr/bin"
cp "$work/x/usr/bin/openssl" "$out/root/usr/bin/openssl"
with_libs "$work/x/usr/bin/openssl" "$out/root"
chmod 755 "$out/root/sbin/init"
echo 0 > "$out/root/var/lib/kurrent/boots"
# Users: root and nobody (the OS checks what an unprivileged process can read).
printf 'root:x:0:0:root:/:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n' > "$out/root/etc/passwd"
printf 'root:x:0:\nnogroup:x:65534:\n' > "$out/root/etc/group"

cp "$work/initramfs" "$out/initramfs"
cp "$work/uki.efi" "$out/uki.efi"
echo "$kver" > "$out/kernel-version"
echo "$inputs" > "$out/inputs.sha256"
echo "build:worker-image: built $out (kernel $kver, $(wc -l < "$rd/modules.order") modules, uki $(( $(stat -c %s "$out/uki.efi") / 1048576 )) MiB)"
