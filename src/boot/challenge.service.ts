import { Injectable, OnModuleDestroy, OnModuleInit } from '@nestjs/common';
import { randomFillSync } from 'node:crypto';
import { Clock } from '../common/clock';
import { LedgerStore } from '../store/ledger.store';

/** A nonce lives this long. */
export const CHALLENGE_TTL_MS = 60_000;
/** Live and recently used nonces kept at most (about 200 bytes each: ~20 MB at the cap). */
export const CHALLENGE_CAP = 100_000;

/** What a signed nonce is spent on: once for /boot-vars and once for /boot-menu. */
export type ChallengeUse = 'vars' | 'menu';

interface Entry {
  mac: string;
  nonce: Buffer;
  expires: number;
  used: Set<ChallengeUse>;
}

export type Consumed = { ok: true; nonce: Buffer } | { ok: false; reason: 'no nonce' | 'expired' | 'replayed' | 'wrong mac' };

/**
 * One-time challenges for device signatures (seed 004 section 5): 32 random bytes, bound to a
 * MAC, single use, at most CHALLENGE_TTL_MS. Memory is bounded under any flood: one live nonce
 * per MAC (a new challenge supersedes the last), a global cap with expired entries swept first,
 * and nothing stored for a MAC the ledger does not hold (or holds revoked), whose answer is
 * otherwise identical, so the endpoint is no oracle for which MACs are known.
 */
@Injectable()
export class ChallengeService implements OnModuleInit, OnModuleDestroy {
  private readonly byNonce = new Map<string, Entry>();
  private readonly byMac = new Map<string, string>();
  private timer: NodeJS.Timeout | null = null;

  constructor(
    private readonly store: LedgerStore,
    private readonly clock: Clock,
  ) {}

  onModuleInit(): void {
    // Expired nonces go within a lifetime even when no new challenge reaches the cap.
    this.timer = setInterval(() => this.sweep(), CHALLENGE_TTL_MS);
    this.timer.unref();
  }

  onModuleDestroy(): void {
    if (this.timer) clearInterval(this.timer);
  }

  get size(): number {
    return this.byNonce.size;
  }

  /** CSPRNG bytes drawn 2 KiB at a time (one call into OpenSSL per 64 nonces in a signed storm). */
  private pool = Buffer.alloc(2048);
  private poolOff = this.pool.length;
  private random32(): Buffer {
    if (this.poolOff + 32 > this.pool.length) {
      randomFillSync(this.pool);
      this.poolOff = 0;
    }
    const out = Buffer.from(this.pool.subarray(this.poolOff, this.poolOff + 32));
    this.pool.fill(0, this.poolOff, this.poolOff + 32); // a nonce handed out is not kept in the pool
    this.poolOff += 32;
    return out;
  }

  issue(mac: string): { nonce: string; expires_at: string } {
    const nonce = this.random32();
    const hex = nonce.toString('hex');
    const now = this.clock.now().getTime();
    const expires = now + CHALLENGE_TTL_MS;
    const d = this.store.read().devices.get(mac);
    if (d && d.state !== 'revoked') {
      const old = this.byMac.get(mac);
      if (old) this.byNonce.delete(old);
      if (this.byNonce.size >= CHALLENGE_CAP) this.sweep(now);
      if (this.byNonce.size >= CHALLENGE_CAP) this.byNonce.delete(this.byNonce.keys().next().value!);
      this.byNonce.set(hex, { mac, nonce, expires, used: new Set() });
      this.byMac.set(mac, hex);
    }
    return { nonce: hex, expires_at: new Date(expires).toISOString().replace(/\.\d{3}Z$/, '+00:00') };
  }

  /** Uses the nonce for mac: succeeds once per use, within its lifetime, for the MAC it was issued to. */
  consume(mac: string, hex: string, use: ChallengeUse = 'vars'): Consumed {
    const e = this.byNonce.get(hex);
    if (!e) return { ok: false, reason: 'no nonce' };
    if (e.used.has(use)) return { ok: false, reason: 'replayed' };
    if (e.mac !== mac) return { ok: false, reason: 'wrong mac' };
    if (this.clock.now().getTime() > e.expires) {
      this.drop(hex, e);
      return { ok: false, reason: 'expired' };
    }
    // Kept (used) until it expires, so a replay is told apart from a nonce never issued.
    e.used.add(use);
    // A new challenge for this MAC supersedes it only once both uses are spent.
    if (e.used.size === 2 && this.byMac.get(mac) === hex) this.byMac.delete(mac);
    return { ok: true, nonce: e.nonce };
  }

  /** Removes expired entries (every minute, and whenever an issue finds the store at its cap). */
  sweep(now = this.clock.now().getTime()): void {
    for (const [hex, e] of this.byNonce) if (now > e.expires) this.drop(hex, e);
  }

  private drop(hex: string, e: Entry): void {
    this.byNonce.delete(hex);
    if (this.byMac.get(e.mac) === hex) this.byMac.delete(e.mac);
  }
}
