# The NVMe/TCP half of the worker's /init (sourced by worker-image/init, which defines say, fail,
# up and HANDOVER). Reads the hand-over variable Kurrent's iPXE wrote at sanboot nvme:// (lines of
# key=value, ipxe/src/net/nvme_handover.c), makes it root-only, brings up the NIC it names by DHCP, puts the
# TLS key into the .nvme keyring (on stdin), starts tlshd, connects through /dev/nvme-fabrics (the
# secrets go from a shell builtin into the device: never on a command line, /proc/<pid>/cmdline is
# world-readable) and mounts partition 2 of the namespace as /newroot.

# A value that could smuggle another fabrics option (the kernel splits on ',' and newlines; a
# value read line by line holds no newline) or that is empty where it is needed stops the boot: a
# wrong disk is worse than none.
nvme_value() {
  case "$2" in
    '' | *,*) fail "hand-over field $1 is empty or holds a comma" ;;
  esac
}

nvme_root() {
  local line k v mac= traddr= trsvcid= nqn= hostnqn= hostid= secret= ctrl_secret= identity= psk= ifc i ring answer n= dev= tries
  # EDK2 keeps a volatile variable read-only once boot services have ended (SetVariable answers
  # EFI_WRITE_PROTECTED, efivarfs's unlink EINVAL): the OS cannot delete it, and efivarfs shows it
  # to every user (0644). Root only, before anything else runs; the firmware drops it at reset.
  # (efivarfs also marks a vendor's variable immutable, which refuses a chmod: lift it for that.)
  chattr -i "$HANDOVER" 2>/tmp/chmod.err && chmod 0600 "$HANDOVER" 2>>/tmp/chmod.err && chattr +i "$HANDOVER" 2>>/tmp/chmod.err \
    || fail "could not make the hand-over variable root-only: $(cat /tmp/chmod.err)"
  # Its first 4 bytes are its attributes; the rest is text.
  tail -c +5 "$HANDOVER" > /tmp/handover
  while IFS= read -r line; do
    k=${line%%=*}
    v=${line#*=}
    case "$k" in
      mac) mac=$v ;;
      traddr) traddr=$v ;;
      trsvcid) trsvcid=$v ;;
      nqn) nqn=$v ;;
      hostnqn) hostnqn=$v ;;
      hostid) hostid=$v ;;
      dhchap_secret) secret=$v ;;
      dhchap_ctrl_secret) ctrl_secret=$v ;;
      tls_identity) identity=$v ;;
      tls_psk) psk=$v ;;
    esac
  done < /tmp/handover
  rm -f /tmp/handover
  for k in mac traddr trsvcid nqn hostnqn hostid secret identity psk; do
    eval "nvme_value $k \"\$$k\""
  done
  [ -n "$ctrl_secret" ] && nvme_value dhchap_ctrl_secret "$ctrl_secret"
  say "hand-over variable read (root only): $nqn at $traddr:$trsvcid as $hostnqn"

  # The NIC iPXE booted through, by its MAC; its address by DHCP (as the firmware got it).
  ifc=
  for i in /sys/class/net/*; do
    [ "$(cat "$i/address")" = "$mac" ] && ifc=${i##*/}
  done
  [ -n "$ifc" ] || fail "no NIC with the MAC $mac"
  ip link set lo up
  ip link set "$ifc" up
  printf '#!/bin/sh\ncase "$1" in bound|renew) ip addr flush dev "$interface"; ip addr add "$ip/${mask:-24}" dev "$interface"; [ -n "$router" ] && ip route replace default via "${router%%%% *}" dev "$interface";; esac\nexit 0\n' > /tmp/udhcpc.script
  chmod 755 /tmp/udhcpc.script
  udhcpc -i "$ifc" -f -q -n -t 10 -T 1 -s /tmp/udhcpc.script >/tmp/udhcpc.log 2>&1 || fail "DHCP on $ifc: $(tail -1 /tmp/udhcpc.log)"

  # TLS 1.3: the kernel asks tlshd for the handshake; tlshd looks the PSK up in .nvme.
  ring=$(awk '$9 == ".nvme:" {print $1}' /proc/keys)
  [ -n "$ring" ] || fail "no .nvme keyring (nvme-keyring not loaded)"
  printf %s "$psk" | keyctl padd -x psk "$identity" "0x$ring" >/dev/null || fail "could not add the TLS key to .nvme"
  mkdir -p /etc
  printf '[debug]\nloglevel=0\ntls=0\nnl=0\n[authenticate]\nkeyrings=.nvme\n' > /etc/tlshd.conf
  # Kept running after switch_root: a reconnect needs a new handshake.
  tlshd -s -c /etc/tlshd.conf >/tmp/tlshd.log 2>&1 &

  tries=0
  while [ $tries -lt 5 ]; do
    tries=$((tries + 1))
    # (a failed redirection on exec would end this shell, and with it the machine)
    [ -c /dev/nvme-fabrics ] || fail "no /dev/nvme-fabrics (nvme-fabrics not loaded)"
    exec 3<>/dev/nvme-fabrics
    if printf 'transport=tcp,traddr=%s,trsvcid=%s,nqn=%s,hostnqn=%s,hostid=%s,dhchap_secret=%s%s,tls' \
      "$traddr" "$trsvcid" "$nqn" "$hostnqn" "$hostid" "$secret" "${ctrl_secret:+,dhchap_ctrl_secret=$ctrl_secret}" >&3 2>/tmp/connect.err; then
      answer=$(cat <&3)
      exec 3<&-
      break
    fi
    exec 3<&-
    answer=
    sleep 1
  done
  secret= ctrl_secret= psk=
  case "$answer" in
    instance=*) n=${answer#instance=}; n=${n%%,*} ;;
    *) fail "connect to $nqn refused: $(cat /tmp/connect.err) (the target's log says why)" ;;
  esac
  # 6.12 shows the DH-HMAC-CHAP secrets to every user (S_IRUGO); root only from here on.
  chmod 0600 /sys/class/nvme/nvme$n/dhchap_secret /sys/class/nvme/nvme$n/dhchap_ctrl_secret 2>/dev/null

  i=0
  while [ $i -lt 200 ]; do
    dev=$(ls /sys/class/nvme/nvme$n/ 2>/dev/null | awk '/^nvme[0-9]+(c[0-9]+)?n[0-9]+$/ {print; exit}')
    # With native multipath the path (nvmeXcYnZ) is hidden; the block device is its head nvmeXnZ.
    dev=$(echo "$dev" | sed 's/c[0-9]*n/n/')
    [ -n "$dev" ] && [ -b "/dev/${dev}p2" ] && break
    i=$((i + 1))
    sleep 0.05
  done
  [ -b "/dev/${dev}p2" ] || fail "no root partition on $nqn"
  mount -t ext4 "/dev/${dev}p2" /newroot || fail "mount /dev/${dev}p2"
  say "root /dev/${dev}p2 on NVMe/TCP $nqn (nvme$n) mounted $(up) s after the kernel"

  mount -t tmpfs -o mode=0755 tmpfs /newroot/run
  printf 'KURRENT_MAC=%s\nKURRENT_TRANSPORT=nvme-tcp\nKURRENT_TARGET=%s\nKURRENT_CTRL=nvme%s\n' "$mac" "$nqn" "$n" > /newroot/run/kurrent-boot
  mount --move /dev /newroot/dev
  # The mode lives in efivarfs's inodes, which live as long as its (single) superblock: keep it
  # mounted, so the OS's own efivarfs mount (systemd's) is the same one and shows 0600 too.
  mkdir -p /newroot/run/kurrent/efivars
  mount --move /sys/firmware/efi/efivars /newroot/run/kurrent/efivars
  umount /sys /proc
}
