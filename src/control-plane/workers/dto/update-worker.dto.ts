import { ApiProperty } from '@nestjs/swagger';
import { Transform } from 'class-transformer';
import { ArrayMaxSize, IsArray, IsBoolean, IsIn, IsOptional, IsString, Matches, MaxLength, ValidateIf } from 'class-validator';
import { Int, IsMac, QueryBool } from '../../../shared/validators';
import { MENU_ITEMS, OS_ITEMS } from '../menu';

/** "" and null both clear a field; strings are matched case-insensitively. */
const lowerOrNull = ({ value }: { value: unknown }) =>
  typeof value === 'string' ? (value.trim() === '' ? null : value.trim().toLowerCase()) : value;

export class SetMacDto {
  @IsMac()
  mac!: string;
}

export class DefaultOsDto {
  /** Default boot system; must match one of the worker's disks; null clears. */
  @IsOptional()
  @Transform(lowerOrNull)
  @ValidateIf((_, v) => v !== null)
  @IsIn([...OS_ITEMS])
  @ApiProperty({ enum: OS_ITEMS, required: false, nullable: true })
  os?: string | null;

  /** menu.ipxe main-menu item id; null clears. */
  @IsOptional()
  @Transform(lowerOrNull)
  @ValidateIf((_, v) => v !== null)
  @IsIn([...MENU_ITEMS])
  @ApiProperty({ enum: MENU_ITEMS, required: false, nullable: true })
  menu_default?: string | null;

  /** Menu timeout (ms), 0 = wait forever; null clears (back to IPXE_CP_BOOT_MENU_TIMEOUT). */
  @IsOptional()
  @ValidateIf((_, v) => v !== null)
  @Int({ min: 0, max: 86_400_000, nullable: true })
  menu_timeout?: number | null;
}

export class DefaultDiskDto {
  /** os_tag (12 hex digits) of one of the worker's disks; null clears the default. */
  @ValidateIf((_, v) => v !== null)
  @Matches(/^[0-9a-f]{12}$/, { message: 'os_tag: must be 12 lower-case hex digits (a disk os_tag) or null' })
  @ApiProperty({ type: String, nullable: true, pattern: '^[0-9a-f]{12}$', example: '3f2a9c1b7d4e' })
  os_tag!: string | null;
}

export class DeleteWorkerQueryDto {
  /** Also delete the backing .img files. */
  @IsOptional()
  @QueryBool()
  delete_disk?: boolean = false;

  /** Treat an agent's 404 `iqn not found` as done. */
  @IsOptional()
  @QueryBool()
  ignore_missing_target?: boolean = false;
}

export class DeleteWorkersBatchDto {
  @IsArray()
  @ArrayMaxSize(1000)
  @IsString({ each: true })
  @MaxLength(64, { each: true })
  worker_ids!: string[];

  /** Also delete the backing .img files. */
  @IsOptional()
  @IsBoolean()
  @ApiProperty({ type: Boolean, required: false, default: false })
  delete_disk?: boolean = false;

  /** Treat an agent's 404 `iqn not found` as done. */
  @IsOptional()
  @IsBoolean()
  @ApiProperty({ type: Boolean, required: false, default: false })
  ignore_missing_target?: boolean = false;
}

export class DeleteBatchSucceededDto {
  worker_id!: string;
  hostname!: string;
}

export class DeleteBatchFailedDto {
  /** As given. */
  worker_id!: string;
  error!: string;
}

export class DeleteWorkersBatchResultDto {
  succeeded!: DeleteBatchSucceededDto[];
  failed!: DeleteBatchFailedDto[];
}
