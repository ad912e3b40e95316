import { BootSessionDto } from '../../boots/dto/boot-session.dto';
import { ApiProperty } from '@nestjs/swagger';

export class FingerprintDto {
  manufacturer!: string | null;
  product!: string | null;
  serial!: string | null;
  cpumodel!: string | null;
  /** Normalised decimal (reports may send 0x hex). */
  mem_total!: number | null;
  mem_type!: string | null;
  mem_speed!: number | null;
  chip!: string | null;
  busid!: string | null;
}

/** One entry of state/devices.yml. */
export class DeviceDto {
  /** Lower-case colon form. */
  mac!: string;
  /** SMBIOS UUID (optional second factor). */
  uuid!: string | null;
  @ApiProperty({ enum: ['pooled', 'bound', 'revoked'] })
  state!: 'pooled' | 'bound' | 'revoked';
  /** The binding authority: the worker this device boots as. */
  bound_worker_id!: string | null;
  /** SHA-256 (hex) of the device's P-256 public key (reference field); null until a key is claimed. */
  key_hash!: string | null;
  /** Same as key_hash (seed 004 name). The key itself is never shown. */
  key_sha256!: string | null;
  /** When the device claimed its key inside a registration window. */
  key_claimed_at!: string | null;
  @ApiProperty({ enum: ['ipxe', 'manual'] })
  source!: 'ipxe' | 'manual';
  fingerprint!: FingerprintDto;
  first_seen!: string | null;
  last_seen!: string | null;
  /** The device's newest boot, stage by stage (GET /boots?mac= for the earlier ones); null: none kept. */
  @ApiProperty({ type: () => BootSessionDto, nullable: true })
  last_boot!: BootSessionDto | null;
}
