import { Type } from 'class-transformer';
import { ArrayMaxSize, IsArray, IsOptional, IsString, MaxLength, ValidateNested } from 'class-validator';

/** Like RegisterDeviceDto, but a bad MAC fails only its own entry. */
export class ImportEntryDto {
  @IsString()
  @MaxLength(64)
  mac!: string;

  @IsOptional()
  @IsString()
  @MaxLength(128)
  uuid?: string;

  @IsOptional()
  @IsString()
  @MaxLength(256)
  manufacturer?: string;

  @IsOptional()
  @IsString()
  @MaxLength(256)
  product?: string;

  @IsOptional()
  @IsString()
  @MaxLength(256)
  serial?: string;
}

export class ImportDevicesDto {
  /** Devices to pre-register (at most 10000). */
  @IsArray()
  @ArrayMaxSize(10000)
  @ValidateNested({ each: true })
  @Type(() => ImportEntryDto)
  entries!: ImportEntryDto[];
}

export class ImportSkippedDto {
  mac!: string;
  reason!: string;
}

export class ImportFailedDto {
  /** As given (it may not be a valid MAC). */
  mac!: string;
  error!: string;
}

export class ImportResultDto {
  /** MACs added to the pool. */
  created!: string[];
  skipped!: ImportSkippedDto[];
  failed!: ImportFailedDto[];
}
