import { ApiProperty, ApiPropertyOptional } from '@nestjs/swagger';
import { Type } from 'class-transformer';
import { IsIn, IsOptional, IsString } from 'class-validator';
import { Int, IsWorkerId } from '../../../shared/validators';
import { BOOT_STAGES, BootStage } from '../../repositories/boot-events/boot-event.repository';
import { BOOT_OUTCOMES, BootOutcome } from '../boot-timeline';

export class BootsQueryDto {
  /** Only this device's boots (any MAC spelling; normalised). */
  @IsOptional()
  @IsString()
  mac?: string;

  /** Only boots of this worker (the worker the device was bound to when it booted). */
  @IsOptional()
  @IsWorkerId({ required: false })
  worker_id?: string;

  @IsOptional()
  @IsIn(BOOT_OUTCOMES)
  @ApiProperty({ required: false, enum: BOOT_OUTCOMES })
  outcome?: BootOutcome;

  /** Only boots with a stage at or after this time (ISO 8601). */
  @IsOptional()
  @IsString()
  @ApiProperty({ required: false, format: 'date-time' })
  since?: string;

  /** At most this many boots, newest first (1-1000, default 100). */
  @IsOptional()
  @Type(() => Number)
  @Int({ min: 1, max: 1000 })
  limit?: number = 100;
}

/** One stage of a boot. */
export class BootStageDto {
  @ApiProperty({ enum: BOOT_STAGES })
  stage!: BootStage;
  at!: string;
  /** Milliseconds since the boot's first stage. */
  @ApiProperty({ type: 'integer' })
  offset_ms!: number;
  /**
   * vars: `answer` (disk, reboot, pooled, empty, refused, denied, held) with `disk`, `transport` and
   * `agent` of the disk it was sent to, or `reason`; disk: `target`, `agent`, `initiator`. Never a secret.
   */
  @ApiPropertyOptional({ type: 'object', additionalProperties: { type: 'string' } })
  detail?: Record<string, string>;
}

/** One boot of one device, from its first request to the disk login (and the OS saying it is up). */
export class BootSessionDto {
  /** `<mac without colons>-<start in ms>`: stable while the session is kept. */
  id!: string;
  mac!: string;
  /** The worker the device was bound to when it booted (null: pooled). */
  worker_id!: string | null;
  started_at!: string;
  /** Time of its latest stage. */
  last_stage_at!: string;
  /**
   * in_progress; booted (the disk saw the worker log in); failed (/boot-vars answered something that
   * cannot boot: see reason); stuck (no next stage within stuck_after_seconds); superseded (the
   * device started again first); waiting (pooled: the reboot loop until it is bound); held (boot-loop hold).
   */
  @ApiProperty({ enum: BOOT_OUTCOMES })
  outcome!: BootOutcome;
  /** The furthest stage reached. */
  @ApiProperty({ enum: BOOT_STAGES })
  stage!: BootStage;
  /** Why it failed (failed only), else null. */
  reason!: string | null;
  /** The device is looping now (see GET /settings/boot-policy). */
  looping!: boolean;
  @ApiProperty({ type: [BootStageDto] })
  stages!: BootStageDto[];
}

export class BootsPageDto {
  @ApiProperty({ type: [BootSessionDto] })
  items!: BootSessionDto[];
}

/** A device's boot-loop state. */
export class BootHoldDto {
  mac!: string;
  /** Looping now. */
  looping!: boolean;
  /** /boot-vars answers it the hold script now. */
  held!: boolean;
  /** Whether this call released a loop (false: it was not looping). */
  released!: boolean;
}
