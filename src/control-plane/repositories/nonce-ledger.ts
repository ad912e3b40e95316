import { Injectable, Logger, OnApplicationShutdown, OnModuleInit, Optional } from '@nestjs/common';
import { randomBytes } from 'node:crypto';
import { Clock } from '../common/clock';
import { Database } from './pg/database';

/** A claim that has not answered within this long is decided on this control plane alone. */
export const NONCE_CLAIM_WAIT_MS = 1_000;

export type NonceClaim = 'claimed' | 'spent';

/**
 * Where challenge nonces are sealed and spent. A nonce carries its own MAC binding and expiry
 * under an HMAC (ChallengeService), so any control plane holding the key verifies it without
 * having issued it; what must be shared is the key and the set of spent (nonce, use) pairs.
 *
 * - Files (one control plane): a random key per process start (a restart voids the nonces of
 *   the last minute: the device's next boot asks again) and the spent set in memory.
 * - PostgreSQL: the key in `secrets` (made once by whichever process starts first), spent pairs
 *   in `nonce_uses` (a primary key: the second claim of a pair anywhere is refused). The local
 *   set answers a replay on this process without a query. A claim the database does not answer
 *   within NONCE_CLAIM_WAIT_MS (outage, partition) is decided on the local set alone, logged,
 *   and recorded in the table when it answers again: boots go on during an outage, at the cost
 *   of a replay window on another control plane for the nonces of that minute.
 */
@Injectable()
export class NonceLedger implements OnModuleInit, OnApplicationShutdown {
  private readonly log = new Logger('NonceLedger');
  private key: Buffer = randomBytes(32);
  /** Spent (nonce hex + use) -> expiry (ms). */
  private readonly spent = new Map<string, number>();
  private timer: NodeJS.Timeout | null = null;
  /** Claims decided locally while the database did not answer, written when it does. */
  private backlog: { nonce: Buffer; use: string; expires: number }[] = [];

  constructor(
    private readonly clock: Clock,
    @Optional() private readonly db?: Database,
  ) {}

  private get pg(): boolean {
    return !!this.db?.enabled;
  }

  async onModuleInit(): Promise<void> {
    if (this.pg) {
      await this.db!.init();
      await this.db!.query('INSERT INTO secrets (name, value) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING', ['challenge-key', randomBytes(32)]);
      const r = await this.db!.query<{ value: Buffer }>('SELECT value FROM secrets WHERE name = $1', ['challenge-key']);
      this.key = r.rows[0].value;
    }
    this.timer = setInterval(() => this.sweep(this.clock.now().getTime()), 60_000);
    this.timer.unref();
  }

  onApplicationShutdown(): void {
    if (this.timer) clearInterval(this.timer);
  }

  /** The sealing key (the same on every control plane of a PostgreSQL deployment). */
  sealingKey(): Buffer {
    return this.key;
  }

  /** Spent entries held in memory (bounded by signed boots of the last minute). */
  get size(): number {
    return this.spent.size;
  }

  /**
   * Spends (nonce, use): 'claimed' the first time anywhere, 'spent' after. Synchronous on files;
   * on PostgreSQL a promise (one insert).
   */
  claim(nonce: Buffer, use: string, expires: number, now: number): NonceClaim | Promise<NonceClaim> {
    const k = nonce.toString('hex') + use;
    if (this.spent.has(k)) return 'spent';
    if (this.spent.size >= 100_000) this.sweep(now);
    this.spent.set(k, expires);
    if (!this.pg) return 'claimed';
    return this.claimPg(nonce, use, expires);
  }

  private async claimPg(nonce: Buffer, use: string, expires: number): Promise<NonceClaim> {
    let timer: NodeJS.Timeout | undefined;
    const insert = this.insert(nonce, use, expires);
    const late = new Promise<'late'>((r) => (timer = setTimeout(() => r('late'), NONCE_CLAIM_WAIT_MS)));
    try {
      const got = await Promise.race([insert, late]);
      if (got === 'late' || got === 'failed') {
        this.log.warn(`the database did not record a spent challenge nonce in time; decided on this control plane alone`);
        this.backlog.push({ nonce, use, expires });
        if (this.backlog.length > 100_000) this.backlog.shift();
        insert.then(() => this.drainBacklog()).catch(() => undefined);
        return 'claimed';
      }
      return got ? 'claimed' : 'spent';
    } finally {
      clearTimeout(timer);
    }
  }

  /** true: inserted, false: already there, 'failed': the database did not take it. */
  private async insert(nonce: Buffer, use: string, expires: number): Promise<boolean | 'failed'> {
    try {
      const r = await this.db!.query('INSERT INTO nonce_uses (nonce, use, expires_at) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING RETURNING 1 AS ok', [nonce, use, new Date(expires)]);
      return r.rows.length === 1;
    } catch {
      return 'failed';
    }
  }

  private async drainBacklog(): Promise<void> {
    const list = this.backlog;
    this.backlog = [];
    for (const b of list) if ((await this.insert(b.nonce, b.use, b.expires)) === 'failed') this.backlog.push(b);
  }

  private sweep(now: number): void {
    for (const [k, exp] of this.spent) if (exp < now) this.spent.delete(k);
    if (this.pg) void this.db!.query("DELETE FROM nonce_uses WHERE expires_at < now() - interval '1 minute'").catch(() => undefined);
    if (this.backlog.length) void this.drainBacklog();
  }
}
