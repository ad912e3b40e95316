import { ApiProperty } from '@nestjs/swagger';
import { Equals, IsOptional, IsString, MaxLength } from 'class-validator';
import { PUSH_STATES } from '../../repositories/credentials/credential.repository';

/** Where a worker's credential stands on one agent. */
export class CredentialPushDto {
  agent!: string;
  @ApiProperty({ enum: PUSH_STATES })
  state!: string;
  /** Failed attempts since the last success (0 once pushed). */
  @ApiProperty({ type: 'integer' })
  attempts!: number;
  last_error!: string | null;
  last_attempt_at!: string | null;
  /** When the reconciler tries again (exponential backoff with jitter); null when nothing is due. */
  next_attempt_at!: string | null;
}

/** A worker's NVMe-oF credential: hashes and push states, never the secret. */
export class CredentialDto {
  worker_id!: string;
  /** `<IPXE_CP_HOST_NQN_BASE>:host.<worker_id>`. */
  @ApiProperty({ example: 'nqn.2026-07.com.controller:host.worker-01' })
  hostnqn!: string;
  /** First 12 hex digits of SHA-256 of the DH-HMAC-CHAP secret (as the agent's GET /nvme/hosts shows it). */
  @ApiProperty({ pattern: '^[0-9a-f]{12}$' })
  dhchap_key_sha256!: string;
  /** First 12 hex digits of SHA-256 of the TLS PSK derived from that secret. */
  @ApiProperty({ pattern: '^[0-9a-f]{12}$' })
  tls_psk_sha256!: string;
  issued_at!: string;
  revoked!: boolean;
  revoked_at!: string | null;
  @ApiProperty({ type: [CredentialPushDto] })
  agents!: CredentialPushDto[];
}

/** Exactly one of `generate: true` (a new random secret) or `dhchap_key` (a given one). */
export class SetCredentialDto {
  /** Generate a new secret in place (32 random bytes, `DHHC-1:00:`). */
  @IsOptional()
  @Equals(true, { message: 'must be true when given' })
  @ApiProperty({ type: 'boolean', required: false, enum: [true] })
  generate?: boolean;

  /**
   * A secret in DHHC-1 form as `nvme gen-dhchap-key` prints it (`DHHC-1:<hh>:<base64(key || crc32)>:`;
   * length and CRC-32 are checked). Never returned or logged.
   */
  @IsOptional()
  @IsString()
  @MaxLength(200)
  @ApiProperty({ required: false, example: 'DHHC-1:00:R6h2eAXW4Lqll+UMxGAucf3zlN7oeblPZIRALF/FaXoymw9m:' })
  dhchap_key?: string;
}

export class ReconcilePushDto {
  worker_id!: string;
  agent!: string;
  hostnqn!: string;
  /** create, rotate, retry, drift (the agent lost the host, or holds another key or other links). */
  reason!: string;
  error?: string;
}

export class ReconcileAccessDto {
  worker_id!: string;
  agent!: string;
  /** The iSCSI target (LIO or stgt). */
  iqn!: string;
  /** drift (CHAP or ACL differs from the credential), rename (the worker's hostname, so its initiator name, changed). */
  reason!: string;
  error?: string;
}

/** What one reconciler pass did. */
export class ReconcileResultDto {
  started_at!: string;
  finished_at!: string;
  /** Agents whose hosts were listed in this pass. */
  agents_checked!: string[];
  /** Agents that could not be reached (their pushes count an attempt). */
  agents_unreachable!: string[];
  @ApiProperty({ type: [ReconcilePushDto] })
  pushed!: ReconcilePushDto[];
  @ApiProperty({ type: [ReconcilePushDto] })
  removed!: ReconcilePushDto[];
  @ApiProperty({ type: [ReconcilePushDto] })
  failed!: ReconcilePushDto[];
  /** iSCSI targets whose initiator ACL or CHAP credential was set again (failures included, with their error). */
  @ApiProperty({ type: [ReconcileAccessDto] })
  iscsi_access!: ReconcileAccessDto[];
  /** Pushes and removals waiting for their backoff. */
  @ApiProperty({ type: 'integer' })
  not_due!: number;
}
