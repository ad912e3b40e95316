import { ApiProperty, PickType } from '@nestjs/swagger';
import { Type } from 'class-transformer';
import { ArrayMaxSize, IsArray, IsBoolean, IsOptional, IsString, Matches, MaxLength, ValidateNested } from 'class-validator';
import { ADDRESS_PATTERN, BASE_URL_PATTERN } from '../../../shared/grammars';
import { BASE_URL_RULE } from '../storage-node-registry';
import { AgentUsageDto } from '../../../shared/agent-contract/capabilities.dto';
import { IsAddress, IsAgentName, IsToken, QueryBool } from '../../../shared/validators';

export class AgentRoleDto {
  /** May hold system disks (storage node). */
  @IsOptional()
  @IsBoolean()
  disk?: boolean;

  /** May serve install ISOs as CD targets. */
  @IsOptional()
  @IsBoolean()
  cd?: boolean;
}

export class UpdateAgentDto {
  /** Agent API address: http(s)://<unicast IPv4, [IPv6] or ASCII DNS name>[:port] (a trailing / is dropped; no path). */
  @IsString()
  @MaxLength(512)
  @Matches(new RegExp(BASE_URL_PATTERN), { message: BASE_URL_RULE })
  @ApiProperty({ pattern: BASE_URL_PATTERN, maxLength: 512, example: 'http://10.0.0.3:4840' })
  base_url!: string;

  /** Bearer token of the agent; `${VAR}` placeholders allowed for variables ending in `_TOKEN` and not starting with `IPXE_CP_`. On PUT, "" keeps the current one. Never returned. */
  @IsOptional()
  @IsString()
  @MaxLength(512)
  @IsToken()
  token?: string;

  /** iSCSI data-plane address for workers (IPv4, IPv6 or a DNS name; rendered into boot scripts); default: the host of base_url. */
  @IsOptional()
  @IsString()
  @MaxLength(255)
  @IsAddress()
  @ApiProperty({ required: false, pattern: ADDRESS_PATTERN, example: '10.0.0.3' })
  iscsi_server?: string;

  @IsOptional()
  @ValidateNested()
  @Type(() => AgentRoleDto)
  role?: AgentRoleDto;

  /** Free tags; `lio` / `stgt` also decide the iSCSI separator of /boot-vars. */
  @IsOptional()
  @IsArray()
  @ArrayMaxSize(32)
  @IsString({ each: true })
  @MaxLength(63, { each: true })
  @IsAgentName({ each: true })
  tags?: string[];

  /** false drains the node: no new disks or CDs, no liveness probes; existing disks keep serving. */
  @IsOptional()
  @IsBoolean()
  enabled?: boolean;
}

export class CreateAgentDto extends UpdateAgentDto {
  /** Agent id (lower-cased; letters, digits, '.', '_', '-'; starts and ends with a letter or digit). */
  @IsAgentName({ example: 'storage-stgt-01' })
  id!: string;
}

/** base_url and token as for registration (token needed when the agent has IPXE_AGENT_TOKEN). */
export class ProbeAgentDto extends PickType(UpdateAgentDto, ['base_url', 'token'] as const) {
  /** Edit flow: with no token, use the registered agent's token, which is sent only to its registered base_url (another base_url: 400). A probe caches nothing. */
  @IsOptional()
  @IsString()
  @MaxLength(64)
  agent_id?: string;
}

export class ListAgentsQueryDto {
  /** Probe /healthz and /capabilities of every enabled agent (in parallel, short timeout). */
  @IsOptional()
  @QueryBool()
  @ApiProperty({ type: Boolean, required: false, default: true })
  live?: boolean = true;
}

export class AgentKernelFeaturesDto {
  release!: string | null;
  nvmet_dhchap!: boolean | null;
  nvmet_tls!: boolean | null;
  nvme_keyring!: boolean | null;
  tlshd!: boolean | null;
  reflink!: boolean;
  missing!: string[];
}

export class AgentCapabilitiesDto {
  backend!: string;
  fs_type!: string;
  cd!: boolean;
  persistent!: string;
  base_iqn!: string | null;
  base_nqn?: string | null;
  clone!: string;
  empty_disk!: string;
  transport?: string;
  /** iSCSI backends: the port initiators connect to (agents before this field: absent, 3260 assumed). */
  iscsi_port?: number | null;
  /** nvmet: the NVMe/TCP port and whether it requires TLS (agents before this field: absent). */
  nvme_port?: number | null;
  nvme_tls?: boolean | null;
  /** What the storage node's kernel supports; `missing` says what it cannot serve (agents before this field: absent). */
  kernel?: AgentKernelFeaturesDto | null;
}


export class AgentRoleOutDto {
  disk!: boolean;
  cd!: boolean;
}

/** An agent as the API shows it: never its token. */
export class AgentDto {
  id!: string;
  @ApiProperty({ pattern: BASE_URL_PATTERN })
  base_url!: string;
  @ApiProperty({ pattern: ADDRESS_PATTERN })
  iscsi_server!: string;
  role!: AgentRoleOutDto;
  enabled!: boolean;
  tags!: string[];
  /** live=true only: ok | unreachable | error | disabled. */
  @ApiProperty({ required: false, enum: ['ok', 'unreachable', 'error', 'disabled'] })
  health?: string;
  capabilities?: AgentCapabilitiesDto | null;
  /**
   * live=true: disk space of DISK_DIR and the node's target, master and login counts (the agent's
   * GET /usage); null when the agent is not up or is older than that endpoint.
   */
  usage?: AgentUsageDto | null;
  /** live=true: why the probe failed. */
  error?: string;
}

export class ProbeResultDto {
  @ApiProperty({ pattern: BASE_URL_PATTERN })
  base_url!: string;
  role!: AgentRoleOutDto;
  tags!: string[];
  @ApiProperty({ pattern: ADDRESS_PATTERN })
  iscsi_server!: string;
  enabled!: boolean;
  backend!: string;
  fs_type!: string;
  base_iqn!: string | null;
  clone!: string;
  empty_disk!: string;
  persistent!: string;
}

export class PassthroughDeleteQueryDto {
  @IsString()
  @MaxLength(223)
  iqn!: string;

  @IsOptional()
  @QueryBool()
  delete_file?: boolean = false;

  /** Treat the agent's 404 `iqn not found` as success. */
  @IsOptional()
  @QueryBool()
  ignore_missing?: boolean = false;
}

export class DeleteAgentQueryDto {
  /**
   * Remove the registration although disks or CDs of workers live on the agent: they stay in the
   * ledger, unbootable (their agent is unknown), until deleted or the agent is registered again
   * under the same id. Targets and files on the agent are not touched either way.
   */
  @IsOptional()
  @QueryBool()
  force?: boolean = false;
}

export class AgentDeletedDto {
  deleted!: string;
  force!: boolean;
  /** Disks and CDs of workers left on the removed agent (`<worker_id>/<os>`, `<worker_id>/cd`). */
  targets_left!: string[];
}

export class PassthroughDeletedDto {
  deleted!: string;
  delete_file!: boolean;
  ignored_missing?: boolean;
}
