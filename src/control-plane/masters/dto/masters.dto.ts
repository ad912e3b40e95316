import { ApiProperty } from '@nestjs/swagger';
import { MasterDto, MasterVersionDto } from '../../../shared/agent-contract/luns.dto';

/** Seed 000's `{name, size, mtime}`, plus the versions the agent holds (`latest` null while a dropped file settles, or from an agent older than versions). */
export class MasterOutDto extends MasterDto {}

export class AgentMastersDto {
  agent!: string;
  iscsi_server!: string;
  masters!: MasterOutDto[];
  /** Set when this agent could not be asked. */
  error?: string;
}

/** A version across the fleet: which agents hold it and which disks use it. */
export class MasterVersionCatalogDto extends MasterVersionDto {
  /** Agents holding these bytes under this number. */
  agents!: string[];
  /** Agents holding other bytes under the same number (dropped separately on each): a version to resolve before it is rolled out. */
  @ApiProperty({ required: false, type: [String] })
  conflicting_agents?: string[];
  /** Disks in the ledger that hold this version (cloned from it, or restored to it). */
  disks!: number;
}

export class MasterCatalogDto {
  name!: string;
  @ApiProperty({ type: Number, nullable: true })
  latest!: number | null;
  @ApiProperty({ type: [MasterVersionCatalogDto] })
  versions!: MasterVersionCatalogDto[];
  /** Disks of this master made before versions existed (they restore to the latest version of their agent). */
  unversioned_disks!: number;
}

export class MastersDto {
  agents!: AgentMastersDto[];
  /** Per master, the versions over every agent that answered. */
  @ApiProperty({ type: [MasterCatalogDto] })
  catalog!: MasterCatalogDto[];
}

export class DeletedMasterVersionOutDto {
  name!: string;
  version!: number;
  /** Agents that deleted their copy. */
  deleted_on!: string[];
}

/** One agent's part in a version's distribution. */
export class VersionDistributionAgentDto {
  agent!: string;
  /**
   * present: holds the version; running, failed, interrupted: its transfer (an interrupted one
   * resumes when distribute is asked again); missing: holds the master but not the version, no
   * transfer asked yet; conflict: holds other bytes under this number; unreachable: could not be asked.
   */
  @ApiProperty({ enum: ['present', 'running', 'failed', 'interrupted', 'missing', 'conflict', 'unreachable'] })
  state!: 'present' | 'running' | 'failed' | 'interrupted' | 'missing' | 'conflict' | 'unreachable';
  /** The agent it pulls from (transfers). */
  @ApiProperty({ required: false })
  source?: string;
  /** Bytes to move and moved (transfers). */
  @ApiProperty({ required: false })
  data_bytes?: number;
  @ApiProperty({ required: false })
  bytes_done?: number;
  @ApiProperty({ required: false })
  error?: string;
}

/** GET .../distribution, POST .../distribute: where a version is, and its transfers to the agents that hold the master without it. */
export class VersionDistributionDto {
  name!: string;
  version!: number;
  sha256!: string;
  size!: number;
  /** Every agent that holds the master (any version or its `_tpl_` file) or has disks of it. */
  @ApiProperty({ type: [VersionDistributionAgentDto] })
  agents!: VersionDistributionAgentDto[];
  /** True when every one of them holds the version: a rollout can use it everywhere. */
  complete!: boolean;
}
