import { OnApplicationShutdown, OnModuleInit } from '@nestjs/common';
import { randomBytes } from 'node:crypto';
import { Clock } from '../../common/clock';

export type NonceClaim = 'claimed' | 'spent';

/**
 * Where challenge nonces are sealed and spent. A nonce carries its own MAC binding and expiry
 * under an HMAC (ChallengeService), so any control plane holding the key verifies it without
 * having issued it; what must be shared is the key and the set of spent (nonce, use) pairs. This
 * class keeps the spent set of this process (it answers a replay here without asking the store);
 * an engine says where the key comes from and whether other control planes must hear of a spend.
 */
export abstract class NonceRepository implements OnModuleInit, OnApplicationShutdown {
  protected key: Buffer = randomBytes(32);
  /** Spent (nonce hex + use) -> expiry (ms). */
  private readonly spent = new Map<string, number>();
  private timer: NodeJS.Timeout | null = null;

  constructor(protected readonly clock: Clock) {}

  async onModuleInit(): Promise<void> {
    await this.init();
    this.timer = setInterval(() => this.sweep(this.clock.now().getTime()), 60_000);
    this.timer.unref();
  }

  onApplicationShutdown(): void {
    if (this.timer) clearInterval(this.timer);
  }

  /** The sealing key (the same on every control plane that shares a store). */
  sealingKey(): Buffer {
    return this.key;
  }

  /** Spent entries held in memory (bounded by signed boots of the last minute). */
  get size(): number {
    return this.spent.size;
  }

  /**
   * Spends (nonce, use): 'claimed' the first time anywhere, 'spent' after. Synchronous when this
   * process is the only one; a promise when the store must record it.
   */
  claim(nonce: Buffer, use: string, expires: number, now: number): NonceClaim | Promise<NonceClaim> {
    const k = nonce.toString('hex') + use;
    if (this.spent.has(k)) return 'spent';
    if (this.spent.size >= 100_000) this.sweep(now);
    this.spent.set(k, expires);
    return this.claimShared(nonce, use, expires);
  }

  /** Loads or makes the sealing key. */
  protected abstract init(): Promise<void>;

  /** A first spend on this process: what the other control planes say of it. */
  protected abstract claimShared(nonce: Buffer, use: string, expires: number): NonceClaim | Promise<NonceClaim>;

  /** Drops expired spends (every minute). */
  protected sweep(now: number): void {
    for (const [k, exp] of this.spent) if (exp < now) this.spent.delete(k);
  }
}
