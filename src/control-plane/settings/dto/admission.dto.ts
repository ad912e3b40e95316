import { ApiProperty } from '@nestjs/swagger';
import { RegistrationWindowDto } from '../../devices/dto/registration-window.dto';

export const ADMISSION_MODES = ['open', 'window', 'closed'] as const;
export const REFUSAL_REASONS = ['auto_register_off', 'no_window', 'no_key', 'window_full'] as const;
export type RefusalReason = (typeof REFUSAL_REASONS)[number];

/** Unknown devices /devices/report turned away, by reason. */
export class RefusedDevicesDto {
  /** Counted from this moment: this control plane's start, or the opening of the current window. */
  since!: string;
  @ApiProperty({ type: 'integer' })
  total!: number;
  /** auto_register_off, no_window, no_key, window_full: each present with its count (0 included). */
  @ApiProperty({ type: 'object', additionalProperties: { type: 'integer' } })
  by_reason!: Record<RefusalReason, number>;
}

/** How a device that reports for the first time is treated now, in one place. */
export class AdmissionDto {
  /** open: any new MAC that reports is pooled; window: only inside the open registration window, with a key; closed: only POST /devices or import. */
  @ApiProperty({ enum: ADMISSION_MODES })
  mode!: (typeof ADMISSION_MODES)[number];
  /** The mode in a sentence, with what changes it. */
  explanation!: string;
  /** The auto-register setting. Once a window has been opened it no longer admits keyless devices (secure registration). */
  auto_register!: boolean;
  /** Set by the first registration window (or signature enforcement): new devices only through a window, with a key. */
  secure_registration!: boolean;
  window!: RegistrationWindowDto;
  refused!: RefusedDevicesDto;
}
