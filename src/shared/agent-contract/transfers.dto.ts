import { ApiProperty } from '@nestjs/swagger';
import { Type } from 'class-transformer';
import { IsInt, IsString, Matches, Max, MaxLength, Min, MinLength } from 'class-validator';

/** A range of a version's file that holds data. */
export class ExtentDto {
  /** Bytes from the start of the file. */
  offset!: number;
  /** Bytes. */
  length!: number;
}

/** GET /masters/{name}/versions/{version}/extents: what a receiving agent needs to copy a version, holes left out. */
export class MasterExtentsDto {
  name!: string;
  version!: number;
  size!: number;
  sha256!: string;
  /** Unix seconds (of the version, kept by every copy). */
  created!: number;
  note!: string;
  /** Sum of the extents' lengths: the bytes a transfer moves. */
  data_bytes!: number;
  /** Sorted, not overlapping; holes of less than 1 MiB between data are included. The whole file where the filesystem cannot tell its holes. */
  @ApiProperty({ type: [ExtentDto] })
  extents!: ExtentDto[];
}

/** POST /masters/{name}/transfers: pull a version from another agent (the control plane's call). */
export class StartTransferDto {
  /** The version to copy (it gets the same number here). */
  @IsInt()
  @Min(1)
  @ApiProperty({ minimum: 1 })
  version!: number;

  /** The sending agent's API, `http(s)://host[:port]`. */
  @IsString()
  @MaxLength(300)
  @Matches(/^https?:\/\/[\x21-\x7e]+$/, { message: 'must be http(s)://host[:port]' })
  @ApiProperty({ maxLength: 300, pattern: '^https?://[\\x21-\\x7e]+$' })
  source_url!: string;

  /**
   * A read ticket for this version on the sender, signed by the control plane with the sender's
   * token: it reads that version only, until it expires; the sender's token itself never leaves
   * the control plane. Empty: the sender has no token. Never stored or logged.
   */
  @IsString()
  @MaxLength(200)
  @MinLength(0)
  source_ticket!: string;
}

/** A transfer of a version into this agent: running, done, failed, or interrupted (by a restart; the same POST resumes it). */
export class MasterTransferDto {
  name!: string;
  version!: number;
  /** The sending agent's API (no credentials). */
  source!: string;
  @ApiProperty({ enum: ['running', 'done', 'failed', 'interrupted'] })
  state!: 'running' | 'done' | 'failed' | 'interrupted';
  size!: number;
  sha256!: string;
  /** Bytes to move (the version's data ranges). */
  data_bytes!: number;
  /** Of data_bytes, on disk here (kept across a restart: a resumed transfer starts after them). */
  bytes_done!: number;
  /** Bytes fetched by this run (a resumed transfer moves only what was left). */
  moved_bytes!: number;
  /** Unix seconds. */
  started!: number;
  @ApiProperty({ type: Number, nullable: true })
  finished!: number | null;
  @ApiProperty({ type: String, nullable: true })
  error!: string | null;
}

/** GET /masters/{name}/versions/{version}/content: one range of the version's bytes. */
export class ContentRangeQueryDto {
  /** Bytes from the start of the file. */
  @Type(() => Number)
  @IsInt()
  @Min(0)
  @ApiProperty({ type: 'integer', minimum: 0 })
  offset!: number;

  /** Bytes (up to 64 MiB per request). */
  @Type(() => Number)
  @IsInt()
  @Min(1)
  @Max(64 << 20)
  @ApiProperty({ type: 'integer', minimum: 1, maximum: 64 << 20 })
  length!: number;
}
