import { Type, Transform } from 'class-transformer';
import { IsIn, IsOptional, IsString, Matches, MaxLength, ValidateNested } from 'class-validator';
import { ApiProperty } from '@nestjs/swagger';
import { Int, IsMac, IsWorkerId } from '../../../shared/validators';
import { MENU_ITEMS } from '../menu';

const lower = ({ value }: { value: unknown }) => (typeof value === 'string' ? value.trim().toLowerCase() : value);

export class BootConfigDto {
  /** menu.ipxe main-menu item id (case-insensitive); null clears. */
  @IsOptional()
  @Transform(lower)
  @IsIn([...MENU_ITEMS])
  @ApiProperty({ enum: MENU_ITEMS, required: false, nullable: true })
  menu_default?: string | null;

  /** Menu timeout in ms; 0 = wait forever; null clears. */
  @IsOptional()
  @Int({ min: 0, max: 86_400_000, nullable: true })
  menu_timeout?: number | null;
}

export class CreateWorkerDto {
  /** Worker id; lower-cased. */
  @IsWorkerId()
  worker_id!: string;

  /** Device to bind now; it must be pooled (registered, unbound). */
  @IsOptional()
  @IsMac({ required: false })
  mac?: string;

  /** Defaults to worker_id. */
  @IsOptional()
  @IsWorkerId({ required: false })
  hostname?: string;

  /** Defaults to x86_64. */
  @IsOptional()
  @IsString()
  @Matches(/^[a-z0-9_]{1,32}$/, { message: 'arch must be 1-32 characters of a-z, 0-9 or _' })
  arch?: string;

  /** Install ISO on a cd-role agent (needs a cd-role agent). */
  @IsOptional()
  @IsString()
  @MaxLength(255)
  windows_iso?: string;

  @IsOptional()
  @ValidateNested()
  @Type(() => BootConfigDto)
  boot?: BootConfigDto;
}
