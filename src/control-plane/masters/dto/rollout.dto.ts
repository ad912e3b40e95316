import { ApiProperty } from '@nestjs/swagger';
import { ArrayMaxSize, IsArray, IsInt, IsOptional, IsString, Matches, Max, Min } from 'class-validator';
import { ID_PATTERN } from '../../../shared/mac';
import { BOOT_OUTCOMES } from '../../boots/boot-timeline';

/** Who goes first: named workers, or a share of the master's workers picked by the control plane. Neither: every disk at once. */
export class RolloutCanaryDto {
  /** Workers whose disks take the version first (each must have a disk of the master). */
  @IsOptional()
  @IsArray()
  @ArrayMaxSize(10_000)
  @IsString({ each: true })
  @Matches(ID_PATTERN, { each: true, message: 'must be worker ids (lower-case letters, digits, ".", "_" or "-")' })
  @ApiProperty({ required: false, type: [String], items: { type: 'string', pattern: ID_PATTERN.source } })
  canary_workers?: string[];

  /** Percent (1-100) of the master's workers, at least one, picked by a hash of master, version and worker (fixed at the start). */
  @IsOptional()
  @IsInt({ message: 'must be a whole number from 1 to 100' })
  @Min(1, { message: 'must be a whole number from 1 to 100' })
  @Max(100, { message: 'must be a whole number from 1 to 100' })
  @ApiProperty({ required: false, minimum: 1, maximum: 100 })
  canary_percent?: number;
}

/** POST /masters/{name}/rollout. */
export class StartRolloutDto extends RolloutCanaryDto {
  /** The version the master's disks are to hold. */
  @IsInt({ message: 'must be a whole number from 1' })
  @Min(1, { message: 'must be a whole number from 1' })
  @ApiProperty({ minimum: 1 })
  version!: number;
}

export class RolloutBootDto {
  started_at!: string;
  @ApiProperty({ enum: BOOT_OUTCOMES })
  outcome!: string;
}

export class RolloutDiskDto {
  worker_id!: string;
  os!: string;
  @ApiProperty({ type: String, nullable: true })
  os_tag!: string | null;
  agent!: string;
  @ApiProperty({ enum: ['persistent', 'reset'] })
  mode!: 'persistent' | 'reset';
  /** The version the disk holds (null: made before versions). */
  @ApiProperty({ type: Number, nullable: true })
  version!: number | null;
  /** The version it is to hold now. */
  @ApiProperty({ type: Number, nullable: true })
  target!: number | null;
  canary!: boolean;
  /**
   * on_target; at_next_boot (a reset disk: restored to the target when its worker next boots);
   * needs_rebase (a persistent disk: only a rebase, which discards its data, moves it);
   * not_reached (the rollout is in its canary phase and this worker is not a canary).
   */
  @ApiProperty({ enum: ['on_target', 'at_next_boot', 'needs_rebase', 'not_reached'] })
  state!: 'on_target' | 'at_next_boot' | 'needs_rebase' | 'not_reached';
  /** The worker's last boot if it began after the rollout reached the worker. */
  @ApiProperty({ type: RolloutBootDto, nullable: true })
  boot_since!: RolloutBootDto | null;
}

export class RolloutVersionCountDto {
  @ApiProperty({ type: Number, nullable: true })
  version!: number | null;
  disks!: number;
}

export class RolloutSummaryDto {
  disks!: number;
  on_target!: number;
  at_next_boot!: number;
  needs_rebase!: number;
  not_reached!: number;
  /** Reached workers whose last boot since then booted. */
  booted!: number;
  /** ... failed or got stuck. */
  failed!: number;
  @ApiProperty({ type: [RolloutVersionCountDto] })
  by_version!: RolloutVersionCountDto[];
}

export class RolloutDto {
  name!: string;
  version!: number;
  @ApiProperty({ type: Number, nullable: true })
  previous!: number | null;
  @ApiProperty({ enum: ['canary', 'all'] })
  phase!: 'canary' | 'all';
  rollback!: boolean;
  canary!: string[];
  started_at!: string;
  @ApiProperty({ type: String, nullable: true })
  promoted_at!: string | null;
  summary!: RolloutSummaryDto;
  @ApiProperty({ type: [RolloutDiskDto] })
  disks!: RolloutDiskDto[];
}
