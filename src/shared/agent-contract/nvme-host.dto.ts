import { ApiProperty } from '@nestjs/swagger';
import { ArrayMaxSize, IsArray, IsIn, IsOptional, IsString, MaxLength } from 'class-validator';

export const DHCHAP_HASHES = ['hmac(sha256)', 'hmac(sha384)', 'hmac(sha512)'] as const;
export const DHCHAP_GROUPS = ['null', 'ffdhe2048', 'ffdhe3072', 'ffdhe4096', 'ffdhe6144', 'ffdhe8192'] as const;

export class PutNvmeHostDto {
  /** Host key, `DHHC-1:<hh>:<base64>:`. Never returned or logged. */
  @IsString()
  @MaxLength(200)
  dhchap_key!: string;

  /** Controller key for bidirectional authentication. */
  @IsOptional()
  @IsString()
  @MaxLength(200)
  dhchap_ctrl_key?: string;

  @IsIn([...DHCHAP_HASHES])
  @ApiProperty({ enum: DHCHAP_HASHES })
  dhchap_hash!: string;

  @IsIn([...DHCHAP_GROUPS])
  @ApiProperty({ enum: DHCHAP_GROUPS })
  dhchap_dhgroup!: string;

  /** Retained TLS PSK, `NVMeTLSkey-1:<hh>:<base64>:`. */
  @IsOptional()
  @IsString()
  @MaxLength(200)
  tls_psk?: string;

  /**
   * When given, the subsystems (NQNs) that allow this host, exactly: missing allowed_hosts links
   * are made and other links of this host removed. Every subsystem must exist (404 otherwise,
   * nothing changed). Omitted: the host's links stay as they are.
   */
  @IsOptional()
  @IsArray()
  @ArrayMaxSize(256)
  @IsString({ each: true })
  @MaxLength(223, { each: true })
  subsystems?: string[];
}

export class NvmeHostDto {
  hostnqn!: string;
  dhchap_hash!: string;
  dhchap_dhgroup!: string;
  /** First 12 hex digits of SHA-256(dhchap_key): tells keys apart without revealing them. */
  dhchap_key_sha256!: string;
  dhchap_ctrl_key_sha256!: string | null;
  tls_psk_sha256!: string | null;
  /** Subsystems whose allowed_hosts link this host, sorted. */
  subsystems!: string[];
}

export class DeletedNvmeHostDto {
  /** The host NQN that was removed (with its allowed_hosts links). */
  deleted!: string;
}
