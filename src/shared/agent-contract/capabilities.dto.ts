import { ApiProperty } from '@nestjs/swagger';

export class CapabilitiesDto {
  @ApiProperty({ enum: ['stgt', 'lio', 'nvmet'] })
  backend!: string;
  /** Filesystem of DISK_DIR (btrfs, xfs, ext4, tmpfs, zfs, ...). */
  fs_type!: string;
  /** CD (ISO) targets supported. */
  cd!: boolean;
  /** How targets survive restarts. */
  persistent!: string;
  /** IQN prefix of every target (iSCSI backends); null on nvmet. */
  base_iqn!: string | null;
  /** NQN prefix of every subsystem (nvmet); null on iSCSI backends. */
  base_nqn!: string | null;
  /** Clone method actually available on DISK_DIR, probed at start. */
  clone!: string;
  empty_disk!: string;
  /** The largest disk image (bytes) the filesystem of DISK_DIR can hold, probed at start (at most 64 TiB). */
  @ApiProperty({ type: 'integer' })
  max_file_size!: number;
  @ApiProperty({ enum: ['iscsi', 'nvme-tcp'] })
  transport!: string;
  /**
   * iSCSI port initiators connect to (IPXE_AGENT_ISCSI_PORT: the portal LIO binds; for stgt, the
   * port the operator started tgtd on); null on nvmet. The control plane puts it into iscsi-sep.
   */
  @ApiProperty({ type: 'integer', nullable: true })
  iscsi_port!: number | null;
  /** NVMe/TCP listener port (nvmet); null on iSCSI backends. */
  @ApiProperty({ type: 'integer', nullable: true })
  nvme_port!: number | null;
  /**
   * Whether that port requires TLS 1.3 (nvmet); null on iSCSI backends. False when configured
   * but the kernel cannot (then `kernel.missing` says why and no port is served at all).
   */
  nvme_tls!: boolean | null;
  kernel!: KernelFeaturesDto;
}

/** What the storage node's kernel supports, read from configfs at start (nulls: not asked). */
export class KernelFeaturesDto {
  /** Kernel release (uname -r); null for stgt or a configfs-shaped test directory. */
  release!: string | null;
  /** nvmet in-band authentication (DH-HMAC-CHAP). */
  nvmet_dhchap!: boolean | null;
  /** nvmet TLS 1.3 on TCP ports. */
  nvmet_tls!: boolean | null;
  /** The kernel `.nvme` keyring that holds TLS PSKs. */
  nvme_keyring!: boolean | null;
  /** The tlshd handshake daemon runs. */
  tlshd!: boolean | null;
  /** Reflink clones on DISK_DIR. */
  reflink!: boolean;
  /** What this node cannot serve as configured, each naming the missing feature; empty when nothing. */
  missing!: string[];
}

export class AgentHealthDto {
  status!: string;
}

/** GET /usage: what the storage node holds now (the control plane's overview shows it per agent). */
export class AgentUsageDto {
  /** Size of the filesystem of DISK_DIR, in bytes. */
  @ApiProperty({ type: 'integer' })
  total_bytes!: number;
  /** Bytes in use on it (by anything, not only Kurrent's images). */
  @ApiProperty({ type: 'integer' })
  used_bytes!: number;
  /** Bytes a non-root writer can still allocate there (what a sparse copy checks against). */
  @ApiProperty({ type: 'integer' })
  free_bytes!: number;
  /** Disk targets (iSCSI targets or NVMe subsystems) this node exports. */
  @ApiProperty({ type: 'integer' })
  disk_targets!: number;
  /** CD (ISO) targets. */
  @ApiProperty({ type: 'integer' })
  cd_targets!: number;
  /** Master images (`_tpl_` files) in DISK_DIR, as of the last background scan. */
  @ApiProperty({ type: 'integer' })
  masters!: number;
  /** Initiators logged in now; null where the backend cannot see logins (nvmet without debugfs). */
  @ApiProperty({ type: 'integer', nullable: true })
  sessions!: number | null;
}
