import { ApiProperty } from '@nestjs/swagger';
import { Type } from 'class-transformer';
import { IsOptional, IsString } from 'class-validator';
import { Int } from '../../common/validators';

export class OperationsQueryDto {
  /** Only entries with id > since. */
  @IsOptional()
  @Type(() => Number)
  @Int({ min: 0, max: Number.MAX_SAFE_INTEGER })
  since?: number = 0;

  /** At most this many entries (1-10000). */
  @IsOptional()
  @Type(() => Number)
  @Int({ min: 1, max: 10000 })
  limit?: number = 1000;

  /** Only operations about this device (any MAC spelling; normalised). */
  @IsOptional()
  @IsString()
  mac?: string;
}

/**
 * One audit record. Besides the fixed fields, each op adds its own (old_mac, os, iqn, reason,
 * hostnqn, dhchap_key_sha256, ...): the schema is open for those; never a secret.
 */
export class OperationEntryDto {
  /** Monotonically increasing, never reused. */
  @ApiProperty({ type: 'integer', minimum: 1 })
  id!: number;
  /** ISO-8601 timestamp. */
  ts!: string;
  /** Operation name, e.g. device.bind, worker.create, settings.auto_register, credential.push. */
  op!: string;
  @ApiProperty({ enum: ['ok', 'failed', 'started'] })
  status!: string;
  /** Caller's address (or `reconciler`, `boot-vars` for what the control plane did by itself). */
  client?: string;
  /** The device concerned, lower-case colon form. */
  mac?: string | null;
  /** The worker concerned. */
  worker_id?: string | null;
  /** The storage agent concerned. */
  agent?: string | null;
  /** Why it failed (status failed). */
  error?: string;
}

export class OperationsPageDto {
  /** Pass as `since` to read the next page. */
  next_cursor!: number;
  entries!: OperationEntryDto[];
}
