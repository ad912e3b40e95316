#!/usr/bin/env bash
# npm run build:ipxe — Kurrent's iPXE, from the vendored snapshot (vendor/, or
# $KURRENT_IPXE_TARBALL), never modified in place: unpacked into build/ipxe/, our config
# (ipxe/config/local/*.h) and commands (ipxe/src/*.c) added, then built:
#   build/ipxe/out/8086100e.efirom   UEFI e1000 option ROM
#   build/ipxe/out/snponly.efi        chainloadable EFI iPXE (any NIC with SNP)
#   build/ipxe/out/selftest.efi       snponly with ipxe/selftest.ipxe embedded (the tests' device)
#   build/ipxe/out/marker.efi         snponly with ipxe/marker.ipxe embedded (the tests' worker OS)
#   build/ipxe/out/ipxe.pxe           BIOS iPXE (x86_64-pcbios, chainloaded by PXE): the NVMe/TCP SAN
#                                     driver behind INT 13h; no device-key commands (they use EFI NVRAM)
# ipxe/src/net/*: the NVMe/TCP SAN driver (sanboot nvme://, TLS 1.3 PSK, DH-HMAC-CHAP), into src/net/tcp/.
# TRUST: KURRENT_IPXE_TRUST=<cert.pem> pins the controller's certificate (iPXE ignores a `trust`
# set later by a script). Skipped when the inputs' digest matches the last build's.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
tarball=${KURRENT_IPXE_TARBALL:-$root/vendor/ipxe-0ab2277c40f1.tar.xz}
build=${KURRENT_IPXE_BUILD:-$root/build/ipxe}
trust=${KURRENT_IPXE_TRUST:-}
[ -f "$tarball" ] || { echo "build:ipxe: vendored iPXE not found at $tarball" >&2; exit 2; }
[ -z "$trust" ] || [ -f "$trust" ] || { echo "build:ipxe: KURRENT_IPXE_TRUST=$trust not found" >&2; exit 2; }

inputs=$( { sha256sum "$tarball" "$0" "$root"/ipxe/config/local/*.h "$root"/ipxe/src/*.c "$root"/ipxe/src/net/* "$root"/ipxe/*.ipxe | cut -d' ' -f1
            [ -n "$trust" ] && sha256sum "$trust" | cut -d' ' -f1
            gcc --version | head -1; } | sha256sum | cut -d' ' -f1)
out=$build/out
if [ -f "$out/inputs.sha256" ] && [ "$(cat "$out/inputs.sha256")" = "$inputs" ] && [ -f "$out/snponly.efi" ] && [ -f "$out/8086100e.efirom" ] && [ -f "$out/selftest.efi" ] && [ -f "$out/marker.efi" ] && [ -f "$out/ipxe.pxe" ]; then
  echo "build:ipxe: up to date ($out)"
  exit 0
fi

rm -rf "$build"
mkdir -p "$build" "$out"
tar -xJf "$tarball" -C "$build"
src=$(echo "$build"/ipxe-*/src)
cp "$root"/ipxe/config/local/*.h "$src/config/local/"
cp "$root"/ipxe/src/*.c "$src/hci/commands/"
cp "$root"/ipxe/src/net/* "$src/net/tcp/"
# Link the commands and the NVMe/TCP SAN driver in: iPXE only takes objects some config requires.
printf '\n#ifdef KURRENT_CMD\nREQUIRE_OBJECT ( kurrent_cmd );\n#endif\n#ifdef SANBOOT_PROTO_NVME\nREQUIRE_OBJECT ( nvme_tcp );\n#endif\n' >> "$src/config/config.c"

jobs=$(nproc)
trustarg=()
[ -n "$trust" ] && trustarg=("TRUST=$trust")
make -s -C "$src" -j"$jobs" bin-x86_64-efi/8086100e.efirom bin-x86_64-efi/snponly.efi "${trustarg[@]}"
cp "$src/bin-x86_64-efi/8086100e.efirom" "$src/bin-x86_64-efi/snponly.efi" "$out/"
# The same build with the self-test script embedded (a second link, not a second build).
make -s -C "$src" -j"$jobs" bin-x86_64-efi/snponly.efi EMBED="$root/ipxe/selftest.ipxe" "${trustarg[@]}"
cp "$src/bin-x86_64-efi/snponly.efi" "$out/selftest.efi"
make -s -C "$src" -j"$jobs" bin-x86_64-efi/snponly.efi EMBED="$root/ipxe/marker.ipxe" "${trustarg[@]}"
cp "$src/bin-x86_64-efi/snponly.efi" "$out/marker.efi"
make -s -C "$src" -j"$jobs" bin-x86_64-pcbios/ipxe.pxe "${trustarg[@]}"
cp "$src/bin-x86_64-pcbios/ipxe.pxe" "$out/ipxe.pxe"
echo "$inputs" > "$out/inputs.sha256"
echo "build:ipxe: built $out"
