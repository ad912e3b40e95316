import { BootSessionDto } from '../../boots/dto/boot-session.dto';
import { BootReadinessDto } from '../../boot/dto/boot-readiness.dto';
import { ApiProperty, ApiPropertyOptional } from '@nestjs/swagger';

export class DiskSourceDto {
  @ApiProperty({ enum: ['master', 'empty'] })
  type!: 'master' | 'empty';
  /** Master image file name (type=master). */
  name?: string;
  /** The master version the disk holds (type=master; absent on disks made before versions). */
  version?: number;
  /** Size such as 40G (type=empty). */
  size?: string;
}

export class DiskDto {
  /** Storage agent id (config/agents.yml key). */
  agent!: string;
  @ApiPropertyOptional({ enum: ['iscsi', 'nvme-tcp'] })
  transport?: string;
  iqn?: string;
  nqn?: string;
  filename!: string;
  backing!: string;
  os!: string;
  os_version?: string | null;
  /** 12 lower-case hex digits, unique per disk. */
  os_tag?: string;
  source!: DiskSourceDto;
  /** persistent: keeps what the worker writes; reset: restored to its master (by reflink) at the start of every boot of its worker. */
  @ApiProperty({ enum: ['persistent', 'reset'] })
  mode!: 'persistent' | 'reset';
  /** The master's maintenance disk: what its worker writes becomes the next version when promoted. */
  @ApiProperty({ required: false, enum: [true] })
  maintenance?: true;
}

export class CdDto {
  agent!: string;
  iqn!: string;
  iso!: string;
  backing!: string;
}

export class BootDto {
  /** iPXE main-menu item selected when the menu times out. */
  menu_default!: string | null;
  /** Menu timeout in ms; 0 waits forever. */
  menu_timeout!: number | null;
}

/** A worker as the API shows it: the ledger entry plus the projected binding. */
export class WorkerDto {
  hostname!: string;
  arch!: string;
  @ApiProperty({ enum: ['registered', 'ready', 'installing'] })
  state!: 'registered' | 'ready' | 'installing';
  disks!: DiskDto[];
  cd!: CdDto | null;
  worker_id!: string;
  /** MAC of the bound device (null when none). */
  mac!: string | null;
  /** Same as mac: the device bound to this worker. */
  bound_device!: string | null;
  /** ready: bound device and a disk; partial: one of them; idle: neither. */
  @ApiProperty({ enum: ['ready', 'partial', 'idle'] })
  readiness!: 'ready' | 'partial' | 'idle';
  /** Whether its machine boots its default disk now, and every reason when it does not (readiness above is the reference's ledger projection). */
  boot_readiness!: BootReadinessDto;
  /** The newest boot of its bound device, stage by stage; null: no bound device or none kept. */
  @ApiProperty({ type: () => BootSessionDto, nullable: true })
  last_boot!: BootSessionDto | null;
  /** Default boot system (os of one of the disks). */
  default_os!: string | null;
  /** os_tag of the default boot disk (seed 004); default_os is that disk's os. */
  default_disk!: string | null;
  boot!: BootDto;
}

export class WorkerMacDto extends WorkerDto {
  /** false when the MAC was already the bound one (no reload happened). */
  changed!: boolean;
}

export class DnsmasqBindingDto {
  hostname!: string;
  mac!: string;
}

export class ActualLunDto {
  backing!: string;
}

/** The target of a disk or CD as its agent lists it now. */
export class ActualTargetDto {
  /** iSCSI target name. */
  iqn?: string;
  /** NVMe subsystem name. */
  nqn?: string;
  luns!: ActualLunDto[];
}

export class ActualDiskDto {
  os!: string;
  exists!: boolean;
  target!: ActualTargetDto | null;
  /** Why the target could not be checked (agent unreachable, ...). */
  error?: string;
}

export class ActualCdDto {
  exists!: boolean;
  target!: ActualTargetDto | null;
  error?: string;
}

export class ActualStateDto {
  /** The dhcp-hosts.conf line of this hostname, as the file has it now. */
  dnsmasq!: DnsmasqBindingDto | null;
  disks!: ActualDiskDto[];
  cd!: ActualCdDto | null;
}

export class WorkerStatusDto {
  worker!: WorkerDto;
  actual!: ActualStateDto;
}

export class DeleteWorkerResultDto {
  deleted!: string;
  delete_disk!: boolean;
  /** A dhcp-hosts.conf line was removed. */
  dnsmasq_removed!: boolean;
}
