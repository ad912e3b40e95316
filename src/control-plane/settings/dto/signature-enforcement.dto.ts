import { IsBoolean, IsOptional } from 'class-validator';

/** PUT /settings/signature-enforcement. */
export class SetEnforcementDto {
  /** Require a signed one-time challenge before /boot-vars releases per-worker variables. */
  @IsBoolean()
  enabled!: boolean;

  /** Turn it on even though bound devices have no key yet (they will not boot until they claim one). */
  @IsOptional()
  @IsBoolean()
  force?: boolean;
}

export class EnforcementDto {
  enabled!: boolean;
  /** Bound devices without a key: they cannot boot while enforcement is on. */
  keyless_bound_devices!: string[];
}
