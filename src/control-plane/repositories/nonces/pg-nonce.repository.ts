import { Injectable, Logger } from '@nestjs/common';
import { randomBytes } from 'node:crypto';
import { Clock } from '../../common/clock';
import { Database } from '../pg/database';
import { NonceClaim, NonceRepository } from './nonce.repository';

/** A claim that has not answered within this long is decided on this control plane alone. */
export const NONCE_CLAIM_WAIT_MS = 1_000;

/**
 * PostgreSQL: the key in `secrets` (made once by whichever process starts first), spent pairs in
 * `nonce_uses` (a primary key: the second claim of a pair anywhere is refused). A claim the
 * database does not answer within NONCE_CLAIM_WAIT_MS (outage, partition) is decided on the local
 * set alone, logged, and recorded in the table when it answers again: boots go on during an
 * outage, at the cost of a replay window on another control plane for the nonces of that minute.
 */
@Injectable()
export class PgNonceRepository extends NonceRepository {
  private readonly log = new Logger('Nonces');
  /** Claims decided locally while the database did not answer, written when it does. */
  private backlog: { nonce: Buffer; use: string; expires: number }[] = [];

  constructor(
    clock: Clock,
    private readonly db: Database,
  ) {
    super(clock);
  }

  protected async init(): Promise<void> {
    await this.db.init();
    await this.db.query('INSERT INTO secrets (name, value) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING', ['challenge-key', randomBytes(32)]);
    const r = await this.db.query<{ value: Buffer }>('SELECT value FROM secrets WHERE name = $1', ['challenge-key']);
    this.key = r.rows[0].value;
  }

  protected async claimShared(nonce: Buffer, use: string, expires: number): Promise<NonceClaim> {
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
      const r = await this.db.query('INSERT INTO nonce_uses (nonce, use, expires_at) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING RETURNING 1 AS ok', [nonce, use, new Date(expires)]);
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

  protected override sweep(now: number): void {
    super.sweep(now);
    void this.db.query("DELETE FROM nonce_uses WHERE expires_at < now() - interval '1 minute'").catch(() => undefined);
    if (this.backlog.length) void this.drainBacklog();
  }
}
