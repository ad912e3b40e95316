import { SIZE_FORMS, SIZE_PATTERN } from '../../../common/size';
import { ApiProperty } from '@nestjs/swagger';
import { ArrayMaxSize, IsArray, IsOptional, IsString, Matches, MaxLength } from 'class-validator';
import { QueryBool } from '../../../common/validators';

export class CreateLunDiskDto {
  /** Target name: `<base_iqn>:<suffix>` (iSCSI) or `<base_nqn>:<suffix>` (nvmet). */
  @IsString()
  @MaxLength(223)
  iqn!: string;

  /** Backing file name in DISK_DIR; default `<suffix>.img`. */
  @IsOptional()
  @IsString()
  @MaxLength(255)
  filename?: string;

  /** Master file in DISK_DIR to clone (reflink, else sparse copy). Exclusive with size. */
  @IsOptional()
  @IsString()
  @MaxLength(255)
  master?: string;

  /** Empty sparse disk size: 40G, 40GB, 40GiB, 512M, 1T (powers of 1024), 1M to 64T. Exclusive with master. */
  @IsOptional()
  @IsString()
  @Matches(SIZE_PATTERN, { message: `must be ${SIZE_FORMS}` })
  @ApiProperty({ required: false, pattern: SIZE_PATTERN.source, example: '40G' })
  size?: string;

  /** nvmet: host NQNs allowed to connect (credentials via PUT /nvme/hosts first). */
  @IsOptional()
  @IsArray()
  @ArrayMaxSize(64)
  @IsString({ each: true })
  @MaxLength(223, { each: true })
  allowed_hosts?: string[];

  /**
   * lio: initiator IQNs admitted by node ACLs (LUN 0 mapped read-write); the target then admits
   * no other initiator. Omitted: open to any initiator, as before.
   */
  @IsOptional()
  @IsArray()
  @ArrayMaxSize(64)
  @IsString({ each: true })
  @MaxLength(223, { each: true })
  allowed_initiators?: string[];
}

export class CreateCdDto {
  /** ISO file name in DISK_DIR. */
  @IsString()
  @MaxLength(255)
  iso!: string;

  /** Target IQN; default `<base_iqn>:<iso name>`. */
  @IsOptional()
  @IsString()
  @MaxLength(223)
  iqn?: string;
}

export class DeleteLunQueryDto {
  /** Target to delete. */
  @IsString()
  @MaxLength(223)
  iqn!: string;

  /** Also delete the backing file. */
  @IsOptional()
  @QueryBool()
  delete_file?: boolean = false;
}

export class LunBackingDto {
  /** Absolute path of the backing file. */
  backing!: string | null;
}

export class LunTargetDto {
  /** iSCSI target name (stgt, lio). */
  iqn?: string;
  /** NVMe subsystem name (nvmet). */
  nqn?: string;
  /** stgt target id. */
  tid?: number;
  /** A read-only CD (ISO) target. */
  cd!: boolean;
  luns!: LunBackingDto[];
  /** nvmet: allowed host NQNs. */
  allowed_hosts?: string[];
  /** lio: initiator IQNs of the node ACLs (absent: open to any initiator). */
  allowed_initiators?: string[];
}

export class CreatedLunDto {
  iqn!: string;
  backing!: string;
  @ApiProperty({ required: false })
  cd?: boolean;
}

export class DeletedLunDto {
  deleted!: string;
  delete_file!: boolean;
}

export class ScanCreatedDto {
  iqn!: string;
  cd!: boolean;
}

export class ScanSkippedDto {
  iqn!: string;
  reason!: string;
}

export class ScanResultDto {
  created!: ScanCreatedDto[];
  skipped!: ScanSkippedDto[];
}

export class MasterDto {
  name!: string;
  /** Bytes. */
  size!: number;
  /** Unix seconds. */
  mtime!: number;
}
