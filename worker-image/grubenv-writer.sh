#!/usr/bin/env bash
# The boot file of the write-path test of Kurrent's NVMe/TCP iPXE (test/kernel/ipxe-nvme): GRUB
# (Debian's grub-efi-amd64-bin, its grub-mkimage from grub-common, both only unpacked) with an
# embedded configuration that prints the `stamp` of /grubenv, writes a new one with save_env
# (GRUB writes the file's blocks in place through UEFI Block I/O, which is iPXE's SAN device), the
# same for the 64 KiB /grubenv64, and powers off. Output, cached while its inputs' digest is unchanged:
#   build/worker-image/grubenv-writer.efi   the EFI/BOOT/BOOTX64.EFI of the test's master (the
#                                           test writes the master's /grubenv and /grubenv64)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${KURRENT_WORKER_IMAGE_BUILD:-$root/build/worker-image}
cache=${KURRENT_KERNEL_NODE_BUILD:-$root/build/kernel-node}/cache
mkdir -p "$cache" "$out"
# fetch
source "$root/kernel-node/lib.sh"

debs=("$(fetch grub-efi-amd64-bin)" "$(fetch grub-common)")
inputs=$( { sha256sum "${debs[@]}" "$0" | cut -d' ' -f1; } | sha256sum | cut -d' ' -f1)
if [ -f "$out/grubenv-writer.efi" ] && [ "$(cat "$out/grubenv-writer.sha256" 2>/dev/null)" = "$inputs" ]; then
  exit 0
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for d in "${debs[@]}"; do dpkg-deb -x "$d" "$work/x"; done
# $root is the device GRUB was loaded from (the SAN disk); "." ends the stamp so an empty one
# shows. The test puts `next` in the master's block; GRUB copies it to `stamp` and saves: the
# second boot of the same clone prints what the first one wrote.
# /grubenv is 1 KiB (one write within the target's in-capsule size); /grubenv64 is 64 KiB in one
# cluster (one write larger than it: the target asks for the data with R2T).
cat > "$work/early.cfg" <<'CFG'
echo KURRENT-GRUB: up root=$root
load_env -f /grubenv stamp next
load_env -f /grubenv64 stamp64
echo KURRENT-GRUB: stamp=$stamp. stamp64=$stamp64.
set stamp=$next
set stamp64=$next
save_env -f /grubenv stamp
save_env -f /grubenv64 stamp64
echo KURRENT-GRUB: saved
halt
CFG
"$work/x/usr/bin/grub-mkimage" -d "$work/x/usr/lib/grub/x86_64-efi" -O x86_64-efi -p /EFI/BOOT -c "$work/early.cfg" \
  -o "$work/grubenv-writer.efi" fat loadenv echo halt test part_gpt part_msdos
mv "$work/grubenv-writer.efi" "$out/"
echo "$inputs" > "$out/grubenv-writer.sha256"
echo "build:grubenv-writer: built $out/grubenv-writer.efi"
