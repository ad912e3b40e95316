import { IsBoolean } from 'class-validator';

export class AutoRegisterDto {
  /** Whether unknown MACs reporting through /devices/report enter the device pool. */
  @IsBoolean()
  enabled!: boolean;
}
