import { ApiProperty } from '@nestjs/swagger';
import { IsIn, IsOptional, IsString, Matches, MaxLength } from 'class-validator';
import { IsWorkerId } from '../../../shared/validators';
import { OS_ITEMS } from '../menu';
import { Transform } from 'class-transformer';

/** POST /masters/{name}/maintenance: which worker writes the master, and as which of its disks. */
export class StartMaintenanceDto {
  /** The maintenance worker (a dedicated seat, as CCBoot's super client). */
  @IsWorkerId()
  worker_id!: string;

  /** The menu item the disk boots as; the worker must have no disk of this os yet. */
  @Transform(({ value }) => (typeof value === 'string' ? value.trim().toLowerCase() : value))
  @IsIn([...OS_ITEMS])
  @ApiProperty({ enum: OS_ITEMS })
  os!: string;

  /** Pin the agent (default: placement among the agents holding the master). */
  @IsOptional()
  @IsWorkerId({ required: false, example: 'storage-stgt-01' })
  disk_agent?: string;
}

/** POST /masters/{name}/maintenance/promote. */
export class PromoteMaintenanceDto {
  /** What changed in this version (one line, up to 500 characters). */
  @IsOptional()
  @IsString()
  @MaxLength(500)
  @Matches(/^[^\u0000-\u001f\u007f\u2028\u2029]*$/, { message: 'must be one line without control characters' })
  note?: string;
}

/** A master's maintenance: its one writer. */
export class MaintenanceDto {
  name!: string;
  worker_id!: string;
  os!: string;
  @ApiProperty({ type: String, nullable: true })
  os_tag!: string | null;
  agent!: string;
  /** The disk's target. */
  target!: string;
  /** The version the maintenance disk was cloned from. */
  @ApiProperty({ type: Number, nullable: true })
  from_version!: number | null;
}

export class PromotedMaintenanceDto {
  name!: string;
  /** The new version. */
  version!: number;
  agent!: string;
  sha256!: string;
  /** The maintenance disk was deleted (its worker no longer has it). */
  disk_deleted!: boolean;
}
