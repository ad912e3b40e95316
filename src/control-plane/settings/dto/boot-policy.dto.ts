import { ApiProperty } from '@nestjs/swagger';
import { IsIn, IsInt, IsOptional, Max, Min } from 'class-validator';

export const LOOP_ACTIONS = ['hold', 'keep-looping'] as const;
export type LoopAction = (typeof LOOP_ACTIONS)[number];

/** How boots are judged: when a boot is stuck, when a device is looping, and what a looping device is answered. */
export class BootPolicyDto {
  /** Boots of one device that never reach its disk, within loop_window_minutes, that make it `looping` (default 3). */
  @ApiProperty({ type: 'integer', minimum: 2, maximum: 100 })
  loop_threshold!: number;
  /** The window those boots are counted in (default 10). */
  @ApiProperty({ type: 'integer', minimum: 1, maximum: 1440 })
  loop_window_minutes!: number;
  /** hold (default): /boot-vars answers a looping device a script that stops on a console message until it is released; keep-looping: answered as before, only marked. */
  @ApiProperty({ enum: LOOP_ACTIONS })
  loop_action!: LoopAction;
  /** A boot with no next stage for this long is `stuck` (default 300). */
  @ApiProperty({ type: 'integer', minimum: 10, maximum: 86400 })
  stuck_after_seconds!: number;
}

/** PUT /settings/boot-policy: the fields to change (the others keep their value). */
export class SetBootPolicyDto {
  @IsOptional()
  @IsInt()
  @Min(2)
  @Max(100)
  @ApiProperty({ type: 'integer', minimum: 2, maximum: 100, required: false })
  loop_threshold?: number;

  @IsOptional()
  @IsInt()
  @Min(1)
  @Max(1440)
  @ApiProperty({ type: 'integer', minimum: 1, maximum: 1440, required: false })
  loop_window_minutes?: number;

  @IsOptional()
  @IsIn(LOOP_ACTIONS)
  @ApiProperty({ enum: LOOP_ACTIONS, required: false })
  loop_action?: LoopAction;

  @IsOptional()
  @IsInt()
  @Min(10)
  @Max(86400)
  @ApiProperty({ type: 'integer', minimum: 10, maximum: 86400, required: false })
  stuck_after_seconds?: number;
}

export const DEFAULT_BOOT_POLICY: BootPolicyDto = Object.freeze({ loop_threshold: 3, loop_window_minutes: 10, loop_action: 'hold', stuck_after_seconds: 300 });
