import { ApiProperty } from '@nestjs/swagger';

/** format=json of /boot-vars; `{}` when the caller is not identified. */
export class BootVarsDto {
  /** IQN prefix of the default boot disk (absent without a disk). */
  base_iqn?: string;
  /** Data-plane address of that disk's agent. */
  iscsi_server?: string;
  /**
   * root-path separator `:<protocol>:<port>:<lun>:`: stgt `:::1:`, LIO `::::`; an agent on another
   * iSCSI port than 3260 (capabilities.iscsi_port) puts it between the first colons (`::3261:1:`).
   */
  iscsi_sep?: string;
  /**
   * A worker with iSCSI disks on LIO or stgt: the CHAP user name its targets require (the worker id). In the
   * iPXE script `set username`, the setting iPXE's iSCSI initiator answers CHAP with.
   */
  iscsi_username?: string;
  /**
   * The CHAP secret (derived from the worker's credential; rotates and is revoked with it). iPXE
   * `set password`. Only to the bound MAC, like tls_psk.
   */
  iscsi_password?: string;
  /** NVMe/TCP default disk (seed 004): the subsystem NQN. With it, no iSCSI variable is sent. */
  disk_nqn?: string;
  /** Data-plane address of that disk's agent. */
  storager_ip?: string;
  /** The agent's NVMe/TCP port (TLS 1.3 required; 4421 by default). */
  nvme_port?: number;
  /** The worker's host NQN. */
  hostnqn?: string;
  /**
   * The worker's TLS PSK in interchange form (`NVMeTLSkey-1:01:<base64>:`). With the two
   * DH-HMAC-CHAP secrets, the only secrets this unauthenticated route hands out, and only to the
   * MAC bound to the worker: turn on signature enforcement so only the bound device's key can
   * fetch them.
   */
  tls_psk?: string;
  /**
   * The worker's DH-HMAC-CHAP secret (`DHHC-1:00:<base64>:`, nvme connect's `--dhchap-secret`),
   * sent with tls_psk and under the same rule: only to the bound MAC (and its signature when
   * enforcement is on).
   */
  dhchap_secret?: string;
  /**
   * The controller's DH-HMAC-CHAP secret (`--dhchap-ctrl-secret`): the host checks the target's
   * answer with it (bidirectional authentication). Derived from dhchap_secret, so it rotates and
   * is revoked with it.
   */
  dhchap_ctrl_secret?: string;
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

export class BootMenuItemDto {
  /** menu.ipxe item id: the os, or `<os>-<os_tag>` for a disk with an os_version. */
  id!: string;
  label!: string;
  /** The sanboot URI: `iscsi:<server><sep><iqn>` or `nvme://<server>:<port>/<nqn>`. */
  root!: string;
  os!: string;
  os_version!: string | null;
  os_tag!: string | null;
  @ApiProperty({ enum: ['iscsi', 'nvme-tcp'] })
  transport!: string;
}

/** format=json of /boot-menu; `{}` when the caller is not identified as a worker. */
export class BootMenuDto {
  @ApiProperty({ type: [BootMenuItemDto], required: false })
  items?: BootMenuItemDto[];
  /** Root path of the install CD (menu-install), when the worker has one. */
  install_root?: string;
}
