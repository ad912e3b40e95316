import { IsIn, IsOptional } from 'class-validator';

export class ListDevicesQueryDto {
  /** Filter by state. */
  @IsOptional()
  @IsIn(['all', 'pooled', 'bound', 'revoked'])
  state?: 'all' | 'pooled' | 'bound' | 'revoked' = 'all';
}
