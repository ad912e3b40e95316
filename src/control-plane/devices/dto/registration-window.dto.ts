import { ApiProperty } from '@nestjs/swagger';
import { IsOptional, ValidateIf } from 'class-validator';
import { Int } from '../../../shared/validators';

/** POST /devices/registration-window. */
export class OpenWindowDto {
  /** How long the window stays open, 1-60 minutes. */
  @Int({ min: 1, max: 60, required: true })
  ttl_minutes!: number;

  /** How many new devices it may admit (omit or null: no quota). */
  @IsOptional()
  @ValidateIf((_, v) => v !== null)
  @Int({ min: 1, max: 100_000, nullable: true })
  max_devices?: number | null;
}

/** The registration window as GET/POST/DELETE /devices/registration-window show it. */
export class RegistrationWindowDto {
  /** Open now (not closed, not expired). */
  open!: boolean;
  /** When the current (or last) window was opened; null if none ever was. */
  opened_at!: string | null;
  expires_at!: string | null;
  @ApiProperty({ type: 'integer', nullable: true })
  max_devices!: number | null;
  /** New devices the window admitted (key claims of known devices do not count). */
  @ApiProperty({ type: 'integer' })
  admitted!: number;
  /** Seats left; null without a quota. */
  @ApiProperty({ type: 'integer', nullable: true })
  remaining!: number | null;
}
