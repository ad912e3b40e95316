import { ApiProperty } from '@nestjs/swagger';
import { Type } from 'class-transformer';
import { Allow, ArrayMaxSize, IsArray, IsOptional, IsString, Matches, MaxLength, ValidateNested } from 'class-validator';
import { MAC_INPUT } from '../../../shared/grammars';
import { BootConfigDto } from './create-worker.dto';

/** What name_prefix may be (trimmed and lower-cased; the ids it makes must still be valid worker ids). */
const NAME_PREFIX_INPUT = '^\\s*[A-Za-z0-9][A-Za-z0-9._-]*\\s*$';

export class BatchCreateWorkersDto {
  /** How many workers, 1-100 (outside that range: 422). */
  @Allow()
  @ApiProperty({ type: 'integer', minimum: 1, maximum: 100 })
  count!: number;

  /** worker_id prefix; ids are prefix + 1-based index zero-padded to the width of count (min 2). */
  @IsOptional()
  @IsString()
  @MaxLength(60)
  @ApiProperty({ required: false, maxLength: 60, pattern: NAME_PREFIX_INPUT })
  name_prefix?: string;

  /** One MAC per worker (length must equal count); each is bound as in POST /workers. */
  @IsOptional()
  @IsArray()
  @ArrayMaxSize(100)
  @IsString({ each: true })
  @MaxLength(64, { each: true })
  @ApiProperty({ required: false, type: 'array', maxItems: 100, items: { type: 'string', maxLength: 64, pattern: MAC_INPUT } })
  macs?: string[];

  @IsOptional()
  @IsString()
  @Matches(/^[a-z0-9_]{1,32}$/, { message: 'arch must be 1-32 characters of a-z, 0-9 or _' })
  arch?: string;

  @IsOptional()
  @ValidateNested()
  @Type(() => BootConfigDto)
  boot?: BootConfigDto;
}

export class BatchWorkerItemDto {
  worker_id!: string;
  hostname!: string;
  mac!: string | null;
}

export class BatchWorkerSkippedDto extends BatchWorkerItemDto {
  reason!: string;
}

export class BatchWorkerFailedDto extends BatchWorkerItemDto {
  error!: string;
}

export class BatchCreateWorkersResultDto {
  succeeded!: BatchWorkerItemDto[];
  skipped!: BatchWorkerSkippedDto[];
  failed!: BatchWorkerFailedDto[];
}
