import { ApiProperty } from '@nestjs/swagger';
import { Type } from 'class-transformer';
import { IsOptional, IsString, MaxLength } from 'class-validator';
import { Int } from '../../../shared/validators';
import { CHANGE_TOPICS, ChangeTopic } from '../change-feed';

export class ChangesQueryDto {
  /** The `cursor` of the previous answer; absent on the first call (answered at once with `reset`). */
  @IsOptional()
  @IsString()
  @MaxLength(64)
  cursor?: string;

  /** Seconds to wait for a change when none happened after the cursor (0-60, default 25). */
  @IsOptional()
  @Type(() => Number)
  @Int({ min: 0, max: 60 })
  wait?: number = 25;
}

/** What changed after the cursor. */
export class ChangesDto {
  /** Pass it to the next call. */
  cursor!: string;
  /**
   * What changed, each naming the reads to do again: `ledger` (devices, workers, disks, bindings,
   * credentials), `audit` (GET /operations; masters and agents' disks change through audited
   * operations), `boots` (GET /boots, and boots turning stuck), `agents` (an agent went up or down,
   * or its capabilities changed), `settings`. Empty when the wait ran out.
   */
  @ApiProperty({ enum: CHANGE_TOPICS, isArray: true })
  topics!: ChangeTopic[];
  /**
   * The cursor was absent or is not this control plane's (it restarted, or another one answered):
   * read everything again. `topics` then lists every topic.
   */
  reset!: boolean;
}
