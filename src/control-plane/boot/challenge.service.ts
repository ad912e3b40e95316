import { Injectable } from '@nestjs/common';
import { createHmac, randomFillSync, timingSafeEqual } from 'node:crypto';
import { Clock } from '../common/clock';
import { NonceClaim, NonceRepository } from '../repositories/nonces/nonce.repository';

/** A nonce lives this long (to the second: the expiry is sealed in whole seconds). */
export const CHALLENGE_TTL_MS = 60_000;

/** What a signed nonce is spent on: once for /boot-vars and once for /boot-menu. */
export type ChallengeUse = 'vars' | 'menu';

export type Checked = { ok: true; nonce: Buffer; expires: number } | { ok: false; reason: 'no nonce' | 'expired' | 'bad nonce' };

const RANDOM = 12;
const EXPIRY = 4;
const TAG = 16;
const LABEL = Buffer.from('kurrent challenge v1\0');

/**
 * One-time challenges for device signatures (seed 004 section 5): 32 bytes, bound to a MAC,
 * single use, at most CHALLENGE_TTL_MS. The nonce seals its own binding, so any control plane
 * behind a load balancer verifies one another issued:
 *
 *   random (12) || expiry, Unix seconds (4, big-endian) || HMAC-SHA256(key, label || random || expiry || mac)[0..16]
 *
 * Nothing is stored when a nonce is issued (a flood of challenges costs no memory, and unknown
 * MACs get an answer of the same shape, so the endpoint is no oracle for which MACs are known).
 * Spending is recorded per use only after the signature verified (NonceRepository: in memory on
 * files, shared in PostgreSQL), so a forged request cannot burn a device's nonce.
 */
@Injectable()
export class ChallengeService {
  constructor(
    private readonly nonces: NonceRepository,
    private readonly clock: Clock,
  ) {}

  /** Spent nonces held in memory (signed boots of the last minute). */
  get size(): number {
    return this.nonces.size;
  }

  /** CSPRNG bytes drawn 2 KiB at a time (one call into OpenSSL per 170 nonces in a signed storm). */
  private pool = Buffer.alloc(2040);
  private poolOff = this.pool.length;
  private random(into: Buffer): void {
    if (this.poolOff + RANDOM > this.pool.length) {
      randomFillSync(this.pool);
      this.poolOff = 0;
    }
    this.pool.copy(into, 0, this.poolOff, this.poolOff + RANDOM);
    this.pool.fill(0, this.poolOff, this.poolOff + RANDOM); // handed out, not kept
    this.poolOff += RANDOM;
  }

  private tag(nonce: Buffer, mac: string): Buffer {
    return createHmac('sha256', this.nonces.sealingKey())
      .update(LABEL)
      .update(nonce.subarray(0, RANDOM + EXPIRY))
      .update(Buffer.from(mac.replace(/:/g, ''), 'hex'))
      .digest()
      .subarray(0, TAG);
  }

  issue(mac: string): { nonce: string; expires_at: string } {
    const nonce = Buffer.alloc(RANDOM + EXPIRY + TAG);
    this.random(nonce);
    const expires = Math.floor(this.clock.now().getTime() / 1000) + CHALLENGE_TTL_MS / 1000;
    nonce.writeUInt32BE(expires, RANDOM);
    this.tag(nonce, mac).copy(nonce, RANDOM + EXPIRY);
    return { nonce: nonce.toString('hex'), expires_at: new Date(expires * 1000).toISOString().replace(/\.\d{3}Z$/, '+00:00') };
  }

  /** The nonce's seal, MAC and lifetime (no state read or written). */
  check(mac: string, hex: string): Checked {
    if (!/^[0-9a-f]{64}$/.test(hex)) return { ok: false, reason: 'no nonce' };
    const nonce = Buffer.from(hex, 'hex');
    // A seal that does not verify for this MAC: issued for another MAC, or never issued here.
    if (!timingSafeEqual(nonce.subarray(RANDOM + EXPIRY), this.tag(nonce, mac))) return { ok: false, reason: 'bad nonce' };
    const expires = nonce.readUInt32BE(RANDOM) * 1000;
    if (this.clock.now().getTime() > expires) return { ok: false, reason: 'expired' };
    return { ok: true, nonce, expires };
  }

  /** Spends a checked nonce for one use: after the signature verified, never before. */
  spend(c: { nonce: Buffer; expires: number }, use: ChallengeUse): NonceClaim | Promise<NonceClaim> {
    return this.nonces.claim(c.nonce, use, c.expires, this.clock.now().getTime());
  }
}
