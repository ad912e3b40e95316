import { ApiProperty } from '@nestjs/swagger';
import { Type } from 'class-transformer';
import { IsOptional, IsString, Matches } from 'class-validator';
import { IsAgentName, Int, IsWorkerId } from '../../../shared/validators';

/** `device.bind`, or a family with a trailing `*`: `device.*`, `credential.*`. */
export const OP_FILTER = /^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)*(\.\*)?$/;

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

  /** Only this operation (`device.bind`), or a family (`device.*`). */
  @IsOptional()
  @IsString()
  @Matches(OP_FILTER, { message: 'op must be an operation name such as device.bind, or a family such as device.*' })
  @ApiProperty({ required: false, pattern: OP_FILTER.source, example: 'device.*' })
  op?: string;

  /** Only operations about this worker (its own record or a batch naming it). */
  @IsOptional()
  @IsWorkerId({ required: false })
  worker_id?: string;

  /** Only operations about this storage agent. */
  @IsOptional()
  @IsAgentName()
  agent?: string;

  /**
   * Only the last `tail` matching entries (still id > since), oldest first: what a live view shows
   * first; then it follows with `since=next_cursor`. `limit` is not used with it.
   */
  @IsOptional()
  @Type(() => Number)
  @Int({ min: 1, max: 10000 })
  tail?: number;
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
