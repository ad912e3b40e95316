import { IsOptional, IsString, MaxLength } from 'class-validator';
import { IsMac } from '../../../shared/validators';

export class RegisterDeviceDto {
  @IsMac()
  mac!: string;

  /** SMBIOS UUID. */
  @IsOptional()
  @IsString()
  @MaxLength(128)
  uuid?: string;

  /** Declared manufacturer; later reports from the device overwrite it. */
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
}
