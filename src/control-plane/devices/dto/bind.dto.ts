import { Type } from 'class-transformer';
import { ArrayMaxSize, IsArray, IsIn, IsOptional, IsString, MaxLength, ValidateNested } from 'class-validator';
import { IsWorkerId, QueryBool } from '../../../shared/validators';

export class BindQueryDto {
  /** Target worker. */
  @IsWorkerId()
  worker_id!: string;

  /** Atomically take the device and/or the worker over from their current bindings. */
  @IsOptional()
  @QueryBool()
  force?: boolean = false;
}

export class BatchPairDto {
  /** Device MAC (a malformed one lands in not_found / failed, not a 400). */
  @IsString()
  @MaxLength(64)
  mac!: string;

  @IsString()
  @MaxLength(64)
  worker_id!: string;

  /** Declared values, compared with what the device reported (fingerprint_mismatch). */
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

  @IsOptional()
  @IsString()
  @MaxLength(128)
  uuid?: string;
}

export class BatchBindDto {
  /** manifest (default): use pairs; sequential: macs[i] <-> worker_ids[i]. */
  @IsOptional()
  @IsIn(['manifest', 'sequential'])
  mode?: 'manifest' | 'sequential' = 'manifest';

  @IsOptional()
  @IsArray()
  @ArrayMaxSize(10000)
  @ValidateNested({ each: true })
  @Type(() => BatchPairDto)
  pairs?: BatchPairDto[];

  @IsOptional()
  @IsArray()
  @ArrayMaxSize(10000)
  @IsString({ each: true })
  @MaxLength(64, { each: true })
  macs?: string[];

  @IsOptional()
  @IsArray()
  @ArrayMaxSize(10000)
  @IsString({ each: true })
  @MaxLength(64, { each: true })
  worker_ids?: string[];
}

export class FingerprintMismatchDto {
  /** Declared columns that differ from the reported ones (both non-empty). */
  fields!: string[];
}

export class BatchMatchedDto {
  mac!: string;
  worker_id!: string;
  device_state!: string;
  worker_state!: string;
  fingerprint_mismatch!: FingerprintMismatchDto | null;
}

export class BatchIssueDto {
  /** As given. */
  mac!: string;
  worker_id!: string;
  reason!: string;
}

export class BatchSummaryDto {
  total!: number;
  ok!: number;
  conflict!: number;
  not_found!: number;
}

export class BatchPreviewDto {
  matched!: BatchMatchedDto[];
  conflicts!: BatchIssueDto[];
  not_found!: BatchIssueDto[];
  summary!: BatchSummaryDto;
}

export class BatchSucceededDto {
  mac!: string;
  worker_id!: string;
  fingerprint_mismatch!: FingerprintMismatchDto | null;
}

export class BatchFailedDto {
  mac!: string;
  worker_id!: string;
  error!: string;
}

export class BatchBindResultDto {
  succeeded!: BatchSucceededDto[];
  skipped!: BatchIssueDto[];
  failed!: BatchFailedDto[];
}
