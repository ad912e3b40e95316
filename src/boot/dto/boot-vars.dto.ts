/** format=json of /boot-vars; `{}` when the caller is not identified. */
export class BootVarsDto {
  /** IQN prefix of the default boot disk (absent without a disk). */
  base_iqn?: string;
  /** Data-plane address of that disk's agent. */
  iscsi_server?: string;
  /** root-path separator: stgt `:::1:`, LIO `::::`. */
  iscsi_sep?: string;
  /** default_os > boot.menu_default > reboot. */
  menu_default?: string;
  /** ms: boot.menu_timeout > IPXE_CP_BOOT_MENU_TIMEOUT; the reboot loop uses IPXE_CP_AUTO_BOOT_TIMEOUT. */
  menu_timeout?: number;
}

/** format=json of /devices/challenge. */
export class ChallengeDto {
  /** 32 random bytes as 64 hex digits; single use, bound to the MAC. */
  nonce!: string;
  /** At most 60 s after issue. */
  expires_at!: string;
}
