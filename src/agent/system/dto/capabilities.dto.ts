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
  /** NVMe/TCP listener port (nvmet); null on iSCSI backends. */
  @ApiProperty({ type: 'integer', nullable: true })
  nvme_port!: number | null;
  /** Whether that port requires TLS 1.3 (nvmet); null on iSCSI backends. */
  nvme_tls!: boolean | null;
}

export class AgentHealthDto {
  status!: string;
}
