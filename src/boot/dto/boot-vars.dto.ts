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
