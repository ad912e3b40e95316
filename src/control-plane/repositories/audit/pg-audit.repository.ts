import { BeforeApplicationShutdown, Injectable, Logger, OnApplicationShutdown, OnModuleInit } from '@nestjs/common';
import type { PoolClient } from 'pg';
import { Clock } from '../../common/clock';
import { Database, LOCK } from '../pg/database';
import { AuditEntry, AuditFields, AuditPage, AuditPruned, AuditQuery, AuditRepository, newEntry, TxAudit } from './audit.repository';

/**
 * The audit table (IPXE_CP_STORE=postgres). Ids come from a sequence taken under a lock, so ids
 * increase in commit order across control planes (a reader following since=cursor misses none).
 * Entries are group-committed; a refused insert keeps them first in the queue, retried every second.
 */
@Injectable()
export class PgAuditRepository extends AuditRepository implements OnModuleInit, BeforeApplicationShutdown, OnApplicationShutdown {
  private readonly log = new Logger('Audit');
  private queue: { entry: Omit<AuditEntry, 'id'>; resolve: (e: AuditEntry) => void }[] = [];
  private writing: Promise<void> | null = null;
  private retryTimer: NodeJS.Timeout | null = null;
  private failing = false;

  constructor(
    private readonly clock: Clock,
    private readonly db: Database,
  ) {
    super();
  }

  onModuleInit(): Promise<void> {
    return this.db.init();
  }

  /** Queued entries go in before Database closes its pool. */
  async beforeApplicationShutdown(): Promise<void> {
    // One last try for what is queued; a database still failing then loses it (logged).
    for (let i = 0; i < 3 && (this.writing || this.queue.length); i++) {
      if (this.retryTimer) clearTimeout(this.retryTimer);
      this.retryTimer = null;
      if (!this.writing) this.kick();
      await this.writing;
    }
    if (this.queue.length) this.log.error(`${this.queue.length} audit entr(ies) not written at shutdown: the database refused them`);
  }

  async onApplicationShutdown(): Promise<void> {
    if (this.retryTimer) clearTimeout(this.retryTimer);
    await this.drain().catch(() => undefined);
  }

  record(op: string, fields: AuditFields = {}): Promise<AuditEntry> {
    const entry = newEntry(this.clock.isoNow(), op, fields);
    return new Promise((resolve) => {
      this.queue.push({ entry, resolve });
      this.kick();
    });
  }

  /** The entries of a ledger commit, inserted in its own transaction (ids in commit order). */
  async insertInTx(c: PoolClient, items: TxAudit[]): Promise<AuditEntry[]> {
    await this.db.xactLock(c, LOCK.audit);
    const base = items.map(({ op, fields }) => newEntry(this.clock.isoNow(), op, fields));
    const ids = (await c.query<{ id: string }>("SELECT nextval('audit_ids') AS id FROM generate_series(1, $1)", [base.length])).rows.map((r) => Number(r.id));
    const entries = base.map((b, i) => ({ id: ids[i], ...b }) as AuditEntry);
    await c.query('INSERT INTO audit (id, entry) SELECT * FROM unnest($1::bigint[], $2::jsonb[])', [ids, entries.map((e) => JSON.stringify(e))]);
    return entries;
  }

  /** After the commit of insertInTx's transaction, the entries reach the taps (metrics). */
  published(entries: AuditEntry[]): void {
    for (const e of entries) for (const t of this.taps) t(e);
  }

  async restore(entries: AuditEntry[]): Promise<void> {
    await this.drain();
    if (!entries.length) return;
    await this.db.tx(async (c) => {
      await c.query('INSERT INTO audit (id, entry) SELECT * FROM unnest($1::bigint[], $2::jsonb[])', [entries.map((e) => e.id), entries.map((e) => JSON.stringify(e))]);
      await c.query("SELECT setval('audit_ids', $1)", [Math.max(...entries.map((e) => e.id))]);
    }, LOCK.audit);
  }

  private async drain(): Promise<void> {
    while (this.writing) await this.writing;
  }

  private kick(): void {
    if (this.writing || this.retryTimer || !this.queue.length) return;
    const batch = this.queue.splice(0);
    this.writing = this.db
      .tx(async (c) => {
        const ids = (await c.query<{ id: string }>("SELECT nextval('audit_ids') AS id FROM generate_series(1, $1)", [batch.length])).rows.map((r) => Number(r.id));
        const entries = batch.map((b, i) => ({ id: ids[i], ...b.entry }) as AuditEntry);
        await c.query('INSERT INTO audit (id, entry) SELECT * FROM unnest($1::bigint[], $2::jsonb[])', [ids, entries.map((e) => JSON.stringify(e))]);
        return entries;
      }, LOCK.audit)
      .then(
        (entries) => {
          if (this.failing) this.log.log(`audit table writable again; ${batch.length} queued entr(ies) written`);
          this.failing = false;
          batch.forEach((b, i) => {
            for (const t of this.taps) t(entries[i]);
            b.resolve(entries[i]);
          });
        },
        (err) => {
          // As with the file: the change each entry describes is committed, so its request is not
          // failed; the entries stay first in the queue and are retried every second, in order.
          if (!this.failing) this.log.error({ err }, `audit insert failed; ${batch.length} entr(ies) kept in order and retried`);
          this.failing = true;
          this.queue.unshift(...batch.map((b) => ({ ...b, resolve: () => undefined })));
          batch.forEach((b) => b.resolve({ id: 0, ...b.entry } as AuditEntry));
          this.retryTimer = setTimeout(() => {
            this.retryTimer = null;
            this.kick();
          }, 1000);
          this.retryTimer.unref?.();
        },
      )
      .finally(() => {
        this.writing = null;
        this.kick();
      });
  }

  async list(opts: AuditQuery & { since: number; limit: number }): Promise<AuditPage> {
    await this.drain();
    const where = ['id > $1'];
    const args: unknown[] = [opts.since];
    const arg = (v: unknown) => `$${args.push(v)}`;
    if (opts.mac) where.push(`(entry->>'mac' = ${arg(opts.mac)} OR entry->'macs' ? ${arg(opts.mac)})`);
    if (opts.worker_id) where.push(`(entry->>'worker_id' = ${arg(opts.worker_id)} OR entry->'worker_ids' ? ${arg(opts.worker_id)})`);
    if (opts.agent) where.push(`entry->>'agent' = ${arg(opts.agent)}`);
    if (opts.op) where.push(opts.op.endsWith('.*') ? `starts_with(entry->>'op', ${arg(opts.op.slice(0, -1))})` : `entry->>'op' = ${arg(opts.op)}`);
    const order = opts.tail ? 'DESC' : 'ASC';
    const r = await this.db.query<{ entry: AuditEntry }>(`SELECT entry FROM audit WHERE ${where.join(' AND ')} ORDER BY id ${order} LIMIT ${arg(opts.tail ?? opts.limit)}`, args);
    const entries = r.rows.map((x) => x.entry);
    if (opts.tail) entries.reverse();
    return { next_cursor: entries.length ? entries[entries.length - 1].id : opts.since, entries };
  }

  async publishHold(node: string, cursor: number | null): Promise<void> {
    if (cursor === null) await this.db.query('DELETE FROM audit_holds WHERE node = $1', [node]);
    else await this.db.query('INSERT INTO audit_holds (node, cursor, at) VALUES ($1, $2, now()) ON CONFLICT (node) DO UPDATE SET cursor = $2, at = now()', [node, cursor]);
  }

  /**
   * Deletes the oldest entries in batches of PRUNE_BATCH along the primary key (no scan of the
   * table), stopping at the first entry that is recent enough or that a cursor holds.
   */
  async prune(before: number, keepAbove: number, holdMs: number): Promise<AuditPruned | null> {
    const held = await this.db.query<{ c: string | null }>("SELECT min(cursor) AS c FROM audit_holds WHERE at > now() - $1 * interval '1 millisecond'", [holdMs]);
    const limit = Math.min(keepAbove, held.rows[0].c === null ? Infinity : Number(held.rows[0].c));
    let from: number | null = null;
    let through = 0;
    for (;;) {
      const rows = (await this.db.query<{ id: string; ts: string }>("SELECT id, entry->>'ts' AS ts FROM audit WHERE id > $1 ORDER BY id LIMIT $2", [through, PRUNE_BATCH])).rows;
      let upTo = 0;
      for (const r of rows) {
        if (Number(r.id) > limit || !(Date.parse(r.ts) < before)) break;
        upTo = Number(r.id);
      }
      if (!upTo) break;
      await this.db.query('DELETE FROM audit WHERE id <= $1', [upTo]);
      from ??= Number(rows[0].id);
      through = upTo;
      if (upTo !== Number(rows[rows.length - 1].id)) break;
    }
    return from === null ? null : { from_id: from, through_id: through };
  }
}

const PRUNE_BATCH = 10_000;
