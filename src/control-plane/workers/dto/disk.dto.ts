import { SIZE_FORMS, SIZE_PATTERN } from '../../../shared/size';
import { ApiProperty } from '@nestjs/swagger';
import { Transform, Type } from 'class-transformer';
import { ArrayMaxSize, ArrayMinSize, Equals, IsArray, IsBoolean, IsIn, IsInt, IsOptional, IsString, Matches, MaxLength, Min, ValidateNested } from 'class-validator';
import { IsWorkerId, QueryBool } from '../../../shared/validators';
import { OS_ITEMS } from '../menu';

const lower = ({ value }: { value: unknown }) => (typeof value === 'string' ? value.trim().toLowerCase() : value);

export class DiskSpecDto {
  /** master: clone `name`; empty: a blank sparse disk of `size`. */
  @IsIn(['master', 'empty'])
  @ApiProperty({ enum: ['master', 'empty'] })
  type!: 'master' | 'empty';

  /** System (menu.ipxe item): decides the IQN suffix and file name. */
  @Transform(lower)
  @IsIn([...OS_ITEMS])
  @ApiProperty({ enum: OS_ITEMS })
  os!: string;

  /** Display/grouping version (seed 004); with NVMe/TCP, (os, os_version) is the unique key. */
  @IsOptional()
  @IsString()
  @Matches(/^[A-Za-z0-9][A-Za-z0-9._-]{0,31}$/, { message: 'os_version must be 1-32 letters, digits, ".", "_" or "-"' })
  os_version?: string;

  /** Master file name (type=master). */
  @IsOptional()
  @IsString()
  @MaxLength(255)
  name?: string;

  /** The master version to clone (type=master; default: the latest on the chosen agent). */
  @IsOptional()
  @IsInt({ message: 'must be a whole number from 1' })
  @Min(1, { message: 'must be a whole number from 1' })
  @ApiProperty({ required: false, minimum: 1 })
  version?: number;

  /** Size of an empty disk (type=empty): 40G, 40GB, 40GiB, 512M, 1T (powers of 1024), 1M to 64T. */
  @IsOptional()
  @IsString()
  @Matches(SIZE_PATTERN, { message: `must be ${SIZE_FORMS}` })
  @ApiProperty({ required: false, pattern: SIZE_PATTERN.source, example: '40G' })
  size?: string;

  /**
   * persistent (default): the disk keeps what the worker writes. reset: restored to its master
   * at the start of every boot of its worker, by reflink (type=master only; the agent's DISK_DIR
   * must reflink: btrfs, XFS).
   */
  @IsOptional()
  @IsIn(['persistent', 'reset'])
  @ApiProperty({ required: false, enum: ['persistent', 'reset'], default: 'persistent' })
  mode?: 'persistent' | 'reset';
}

/** PUT /workers/{worker_id}/luns/disk/{os_tag}/mode. */
export class DiskModeDto {
  /** persistent: keeps what the worker writes; reset: restored to its master at every boot (the next boot restores it). */
  @IsIn(['persistent', 'reset'], { message: 'must be persistent or reset' })
  @ApiProperty({ enum: ['persistent', 'reset'] })
  mode!: 'persistent' | 'reset';
}

/** POST /workers/{worker_id}/luns/disk/{os_tag}/rebase. */
export class RebaseDiskDto {
  /** The master version the disk is to hold (default: its rollout's target, else the master's latest). */
  @IsOptional()
  @IsInt({ message: 'must be a whole number from 1' })
  @Min(1, { message: 'must be a whole number from 1' })
  @ApiProperty({ required: false, minimum: 1 })
  version?: number;

  /** Must be true: a rebase replaces everything on the disk with the master version, what the worker wrote is gone. */
  @Equals(true, { message: 'must be true: a rebase replaces everything on the disk with the master version' })
  @ApiProperty({ enum: [true] })
  discard_data!: boolean;
}

export class CreateDiskDto extends DiskSpecDto {
  /** Storage agent; default: placement (enabled, healthy, disk role, holding the master, fewest disks). */
  @IsOptional()
  @IsWorkerId({ required: false, example: 'storage-stgt-01' })
  disk_agent?: string;
}

export class BatchDiskTargetDto {
  @IsWorkerId()
  worker_id!: string;

  /** Storage agent for this worker (a pin); omitted: placement decides. */
  @IsOptional()
  @IsWorkerId({ required: false, example: 'storage-stgt-01' })
  agent?: string;
}

export class BatchDiskDto extends DiskSpecDto {
  @IsArray()
  @ArrayMinSize(1)
  @ArrayMaxSize(1000)
  @ValidateNested({ each: true })
  @Type(() => BatchDiskTargetDto)
  targets!: BatchDiskTargetDto[];

  /** Return the plan execution would follow, change nothing. */
  @IsOptional()
  @IsBoolean()
  dry_run?: boolean;
}

export class BatchDiskOkDto {
  worker_id!: string;
  agent!: string;
  iqn!: string;
}

export class BatchDiskSkippedDto {
  worker_id!: string;
  reason!: string;
}

export class BatchDiskFailedDto {
  worker_id!: string;
  agent!: string | null;
  error!: string;
}

export class BatchDiskResultDto {
  /** true: nothing was done; the lists are the plan. */
  dry_run!: boolean;
  succeeded!: BatchDiskOkDto[];
  skipped!: BatchDiskSkippedDto[];
  failed!: BatchDiskFailedDto[];
}

export class DeleteDiskQueryDto {
  /** Also delete the backing .img file. */
  @IsOptional()
  @QueryBool()
  delete_file?: boolean = false;

  /** Continue when the agent no longer has the target. */
  @IsOptional()
  @QueryBool()
  ignore_missing_target?: boolean = false;

  /** Which disk, when several share the os (NVMe/TCP workers). */
  @IsOptional()
  @IsString()
  @MaxLength(32)
  os_version?: string;
}
