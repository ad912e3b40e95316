# Shell functions shared by kernel-node/build.sh and worker-image/build.sh (sourced; needs $cache).

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

# collect_modules MODDIR DEST MODULE...: each module and what it depends on (modinfo depends=),
# decompressed into DEST/lib/modules/<name>.ko, listed in load order in DEST/modules.order.
# Modules built into the kernel (or absent) are skipped: the init reports a missing feature itself.
collect_modules() {
  local mods=$1 rd=$2 list
  shift 2
  list=$(mktemp)
  mkdir -p "$rd/lib/modules"
  find "$mods" -name '*.ko*' > "$list"
  declare -A path=()
  while read -r f; do
    local n; n=$(basename "$f"); n=${n%%.ko*}
    path[${n//-/_}]=$f
  done < "$list"
  rm -f "$list"
  # Depth-first over depends= so every module comes after what it needs.
  declare -A seen=()
  : > "$rd/modules.order"
  add() {
    local n=${1//-/_} f deps d
    [ -n "${seen[$n]:-}" ] && return
    seen[$n]=1
    f=${path[$n]:-}
    [ -n "$f" ] || return 0
    case "$f" in
      *.xz) xz -dc "$f" > "$rd/lib/modules/$n.ko" ;;
      *.zst) zstd -qdc "$f" > "$rd/lib/modules/$n.ko" ;;
      *) cp "$f" "$rd/lib/modules/$n.ko" ;;
    esac
    deps=$(strings "$rd/lib/modules/$n.ko" | sed -n 's/^depends=//p' | head -1)
    for d in ${deps//,/ }; do add "$d"; done
    echo "$n" >> "$rd/modules.order"
  }
  for m in "$@"; do add "$m"; done
}
