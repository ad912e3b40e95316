import { ApiProperty } from '@nestjs/swagger';
import { Type } from 'class-transformer';
import { IsIn, IsOptional, IsString, MaxLength } from 'class-validator';
import { Int, IsMac } from '../../../shared/validators';
import { DeviceDto } from './device.dto';

export class ListDevicesQueryDto {
  /** Filter by state. */
  @IsOptional()
  @IsIn(['all', 'pooled', 'bound', 'revoked'])
  state?: 'all' | 'pooled' | 'bound' | 'revoked' = 'all';
}

/** GET /devices/page: one page of the device list, filtered and searched by the control plane. */
export class DevicePageQueryDto {
  /** Only devices in this state. */
  @IsOptional()
  @IsIn(['all', 'pooled', 'bound', 'revoked'])
  state?: 'all' | 'pooled' | 'bound' | 'revoked' = 'all';

  /** Only devices with (`claimed`) or without (`none`) a claimed key. */
  @IsOptional()
  @IsIn(['any', 'claimed', 'none'])
  key?: 'any' | 'claimed' | 'none' = 'any';

  /** Free text: the MAC in any spelling (`000C29`, `00-0c-29`), serial, product, manufacturer or bound worker; case-insensitive. */
  @IsOptional()
  @IsString()
  @MaxLength(128)
  q?: string;

  /** At most this many devices (1-1000). */
  @IsOptional()
  @Type(() => Number)
  @Int({ min: 1, max: 1000 })
  limit?: number = 200;

  /** The page after this MAC (the previous page's `next_after`); devices are ordered by MAC. */
  @IsOptional()
  @IsMac({ required: false, description: 'The previous page’s next_after.' })
  after?: string;
}

/** Devices per state in the whole pool (not only the page). */
export class DeviceCountsDto {
  @ApiProperty({ type: 'integer' })
  all!: number;
  @ApiProperty({ type: 'integer' })
  pooled!: number;
  @ApiProperty({ type: 'integer' })
  bound!: number;
  @ApiProperty({ type: 'integer' })
  revoked!: number;
}

export class DevicePageDto {
  /** Devices matching the filter, across all pages. */
  @ApiProperty({ type: 'integer' })
  total!: number;
  counts!: DeviceCountsDto;
  /** This page, ordered by MAC. */
  items!: DeviceDto[];
  /** Pass as `after` for the next page; null on the last one. */
  @ApiProperty({ type: String, nullable: true, example: '00:0c:29:b9:8b:2d' })
  next_after!: string | null;
}
