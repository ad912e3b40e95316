import { SIZE_FORMS, SIZE_PATTERN } from '../size';
import { CHAP_SECRET, CHAP_USERID, DISK_FILE_PATTERN, FILE_NAME_PATTERN, HOST_NQN, INITIATOR_IQN, TARGET_NAME_PATTERN } from '../grammars';
import { ApiProperty } from '@nestjs/swagger';
import { Type } from 'class-transformer';
import { ArrayMaxSize, ArrayMinSize, IsArray, IsInt, IsOptional, IsString, Matches, MaxLength, Min, ValidateNested } from 'class-validator';
import { QueryBool } from '../validators';

/** lio, stgt: the CHAP credential the target requires of every admitted initiator (one-way: the target checks the initiator). */
export class LunChapDto {
  /** CHAP user name the initiator must send (CHAP_N). */
  @IsString()
  @Matches(CHAP_USERID, { message: `chap.userid must match ${CHAP_USERID.source}` })
  @ApiProperty({ pattern: CHAP_USERID.source })
  userid!: string;

  /**
   * CHAP secret, 12 to 64 characters. Kept in the agent's 0600 state and configfs (lio) or tgtd
   * (stgt); never answered back. stgt's accounts are global to tgtd: one user name has one secret
   * on every target bound to it, so setting it on one target sets it on the others.
   */
  @IsString()
  @Matches(CHAP_SECRET, { message: 'chap.secret must be 12 to 64 characters of A-Z a-z 0-9 . _ + / = -' })
  @ApiProperty({ pattern: CHAP_SECRET.source })
  secret!: string;
}

export class CreateLunDiskDto {
  /** Target name: `<base_iqn>:<suffix>` (iSCSI) or `<base_nqn>:<suffix>` (nvmet), the base this agent's own. */
  @IsString()
  @MaxLength(223)
  @ApiProperty({ maxLength: 223, pattern: TARGET_NAME_PATTERN })
  iqn!: string;

  /** Backing file name in DISK_DIR; default `<suffix>.img`. Never `_tpl_` (that marks masters), no control, line-separator or format characters. */
  @IsOptional()
  @IsString()
  @MaxLength(255)
  @Matches(new RegExp(DISK_FILE_PATTERN), { message: 'filename must be a plain file name without _tpl_ (which marks masters), control, line-separator or format characters, not starting with a dot' })
  @ApiProperty({ required: false, pattern: DISK_FILE_PATTERN, maxLength: 255 })
  filename?: string;

  /** Master file in DISK_DIR to clone (reflink, else sparse copy). Exclusive with size. */
  @IsOptional()
  @IsString()
  @MaxLength(255)
  master?: string;

  /** With master: the version to clone (default: the latest; a `_tpl_` file changed since becomes a new version first). */
  @IsOptional()
  @IsInt()
  @Min(1)
  @ApiProperty({ required: false, minimum: 1 })
  master_version?: number;

  /** Empty sparse disk size: 40G, 40GB, 40GiB, 512M, 1T (powers of 1024), 1M to 64T. Exclusive with master. */
  @IsOptional()
  @IsString()
  @Matches(SIZE_PATTERN, { message: `must be ${SIZE_FORMS}` })
  @ApiProperty({ required: false, pattern: SIZE_PATTERN.source, example: '40G' })
  size?: string;

  /** nvmet: host NQNs allowed to connect (credentials via PUT /nvme/hosts first). */
  @IsOptional()
  @IsArray()
  @ArrayMaxSize(64)
  @IsString({ each: true })
  @MaxLength(223, { each: true })
  @Matches(HOST_NQN, { each: true, message: 'allowed_hosts must be host NQNs (nqn.yyyy-mm.<domain>[:...], a real month)' })
  @ApiProperty({ required: false, type: [String], items: { type: 'string', pattern: HOST_NQN.source } })
  allowed_hosts?: string[];

  /**
   * lio, stgt: initiator IQNs admitted (lio: node ACLs with LUN 0 mapped read-write; stgt: tgtd
   * initiator-name ACL); the target then admits no other initiator. Omitted: open to any initiator.
   */
  @IsOptional()
  @IsArray()
  @ArrayMaxSize(64)
  @IsString({ each: true })
  @MaxLength(223, { each: true })
  @Matches(INITIATOR_IQN, { each: true, message: 'allowed_initiators must be initiator IQNs (iqn.yyyy-mm.<domain>[:...], a real month)' })
  @ApiProperty({ required: false, type: [String], items: { type: 'string', pattern: INITIATOR_IQN.source } })
  allowed_initiators?: string[];

  /** lio, stgt, with allowed_initiators: CHAP required of every admitted initiator (lio: TPG authentication on; stgt: an incoming account). */
  @IsOptional()
  @ValidateNested()
  @Type(() => LunChapDto)
  chap?: LunChapDto;
}

/** PUT /luns/access: who may log in to a lio target made closed (with allowed_initiators) or to any stgt disk, and with which CHAP credential. */
export class SetLunAccessDto {
  /** The target. */
  @IsString()
  @MaxLength(223)
  @ApiProperty({ maxLength: 223, pattern: TARGET_NAME_PATTERN })
  iqn!: string;

  /** The initiator IQNs its node ACLs admit from now on (the others are removed). At least one: a closed target stays closed. */
  @IsArray()
  @ArrayMinSize(1)
  @ArrayMaxSize(64)
  @IsString({ each: true })
  @MaxLength(223, { each: true })
  @Matches(INITIATOR_IQN, { each: true, message: 'allowed_initiators must be initiator IQNs (iqn.yyyy-mm.<domain>[:...], a real month)' })
  @ApiProperty({ type: [String], items: { type: 'string', pattern: INITIATOR_IQN.source } })
  allowed_initiators!: string[];

  /** CHAP required of them; omitted: no CHAP (authentication off). */
  @IsOptional()
  @ValidateNested()
  @Type(() => LunChapDto)
  chap?: LunChapDto;
}

/** POST /luns/reset: a disk restored to a master, in place (the same file, the target keeps serving it). */
export class ResetLunDto {
  /** The disk's target (IQN, or NQN on nvmet). */
  @IsString()
  @MaxLength(223)
  @ApiProperty({ maxLength: 223, pattern: TARGET_NAME_PATTERN })
  iqn!: string;

  /** The master (`_tpl_` file in DISK_DIR) the disk is restored to. */
  @IsString()
  @MaxLength(255)
  @Matches(new RegExp(FILE_NAME_PATTERN), { message: 'master must be a plain file name without control, line-separator or format characters, not starting with a dot' })
  @ApiProperty({ pattern: FILE_NAME_PATTERN, maxLength: 255 })
  master!: string;

  /** The version restored (default: the version the disk was cloned from, else the latest). */
  @IsOptional()
  @IsInt()
  @Min(1)
  @ApiProperty({ required: false, minimum: 1 })
  version?: number;
}

export class ResetLunResultDto {
  iqn!: string;
  master!: string;
  /** The master version the disk now holds. */
  version!: number;
  /** The disk's file, now byte-identical to the master (shares its extents). */
  backing!: string;
  /** Time the reflink took. */
  ms!: number;
}

export class CreateCdDto {
  /** ISO file name in DISK_DIR (no control, line-separator or format characters). */
  @IsString()
  @MaxLength(255)
  @Matches(new RegExp(FILE_NAME_PATTERN), { message: 'iso must be a plain file name without control, line-separator or format characters, not starting with a dot' })
  @ApiProperty({ pattern: FILE_NAME_PATTERN, maxLength: 255 })
  iso!: string;

  /** Target IQN; default `<base_iqn>:<iso name>`. */
  @IsOptional()
  @IsString()
  @MaxLength(223)
  @ApiProperty({ required: false, maxLength: 223, pattern: TARGET_NAME_PATTERN })
  iqn?: string;
}

export class DeleteLunQueryDto {
  /** Target to delete. */
  @IsString()
  @MaxLength(223)
  @ApiProperty({ maxLength: 223, pattern: TARGET_NAME_PATTERN })
  iqn!: string;

  /** Also delete the backing file. */
  @IsOptional()
  @QueryBool()
  delete_file?: boolean = false;
}

export class LunBackingDto {
  /** Absolute path of the backing file. */
  backing!: string | null;
}

export class LunTargetDto {
  /** iSCSI target name (stgt, lio). */
  iqn?: string;
  /** NVMe subsystem name (nvmet). */
  nqn?: string;
  /** stgt target id. */
  tid?: number;
  /** A read-only CD (ISO) target. */
  cd!: boolean;
  luns!: LunBackingDto[];
  /** nvmet: allowed host NQNs. */
  allowed_hosts?: string[];
  /** lio, stgt: initiator IQNs admitted (absent: open to any initiator). */
  allowed_initiators?: string[];
  /** lio, stgt: the CHAP user name the target requires (absent: no CHAP). */
  chap_userid?: string;
  /** lio, stgt: first 12 hex digits of SHA-256 of the CHAP secret (tells secrets apart without revealing them; absent on stgt when the agent restarted and has not set it again yet). */
  chap_secret_sha256?: string;
}

export class CreatedLunDto {
  iqn!: string;
  backing!: string;
  /** Cloned from a master: the version it holds. */
  @ApiProperty({ required: false })
  master_version?: number;
  @ApiProperty({ required: false })
  cd?: boolean;
}

export class DeletedLunDto {
  deleted!: string;
  delete_file!: boolean;
}

export class ScanCreatedDto {
  iqn!: string;
  cd!: boolean;
}

export class ScanSkippedDto {
  iqn!: string;
  reason!: string;
}

export class ScanResultDto {
  created!: ScanCreatedDto[];
  skipped!: ScanSkippedDto[];
}

/** One immutable version of a master: a read-only snapshot (reflink) in DISK_DIR/.masters/<name>/. */
export class MasterVersionDto {
  /** 1, 2, ...: never reused, also after a version is deleted. */
  version!: number;
  /** Bytes. */
  size!: number;
  /** Bytes allocated on disk (sparse images hold less than their size). */
  allocated!: number;
  /** SHA-256 of the whole content, holes read as zeros: the same on every agent that holds the version. */
  sha256!: string;
  /** Unix seconds. */
  created!: number;
  note!: string;
  /** drop: a `_tpl_` file placed in DISK_DIR; promote: a maintenance disk made a version; transfer: copied from another agent. */
  @ApiProperty({ enum: ['drop', 'promote', 'transfer'] })
  origin!: 'drop' | 'promote' | 'transfer';
}

export class MasterDto {
  name!: string;
  /** Bytes (of the `_tpl_` file; of the latest version when the file was removed). */
  size!: number;
  /** Unix seconds. */
  mtime!: number;
  /** The newest version (what a disk cloned without naming a version gets); null while a dropped file settles. */
  @ApiProperty({ type: Number, nullable: true })
  latest!: number | null;
  /** Oldest first. */
  @ApiProperty({ type: [MasterVersionDto] })
  versions!: MasterVersionDto[];
}

/** PUT /masters/{name}/versions/{version}/note. */
export class MasterNoteDto {
  /** What changed in this version (up to 500 characters, one line). */
  @IsString()
  @MaxLength(500)
  @Matches(/^[^\u0000-\u001f\u007f\u2028\u2029]*$/, { message: 'must be one line without control characters' })
  note!: string;
}

/** POST /masters/{name}/versions: a disk of this agent (a maintenance disk) becomes the master's next version. */
export class PromoteVersionDto {
  /** The disk's target. */
  @IsString()
  @MaxLength(223)
  @ApiProperty({ maxLength: 223, pattern: TARGET_NAME_PATTERN })
  iqn!: string;

  /** The number to give it (the control plane gives the next over all agents); default: the next here. */
  @IsOptional()
  @IsInt()
  @Min(1)
  @ApiProperty({ required: false, minimum: 1 })
  version?: number;

  /** What changed (one line, up to 500 characters). */
  @IsOptional()
  @IsString()
  @MaxLength(500)
  @Matches(/^[^\u0000-\u001f\u007f\u2028\u2029]*$/, { message: 'must be one line without control characters' })
  note?: string;
}

export class DeletedMasterVersionDto {
  name!: string;
  version!: number;
}

/** An initiator logged in to a target now. */
export class InitiatorSessionDto {
  /** IQN or NQN of the target. */
  target!: string;
  /** Initiator IQN (iSCSI) or host NQN (NVMe/TCP). */
  initiator!: string;
  /** The initiator's address when the backend shows it. */
  address!: string | null;
  /** The backend's id of the session (stgt I_T nexus, LIO session id, nvmet controller) when it has one: a new login gets a new one. */
  id!: string | null;
}

/** GET /sessions: who is logged in where, as the backend sees it. */
export class InitiatorSessionsDto {
  /** false: this backend cannot see sessions on this node (nvmet on a kernel without CONFIG_NVME_TARGET_DEBUGFS); sessions is then empty. */
  supported!: boolean;
  @ApiProperty({ type: [InitiatorSessionDto] })
  sessions!: InitiatorSessionDto[];
}
