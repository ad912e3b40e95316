import { Injectable, OnModuleDestroy, OnModuleInit, Optional } from '@nestjs/common';
import type { PoolClient } from 'pg';
import { ApiError } from '../../../shared/http/api-error';
import { Database, LOCK } from '../pg/database';
import { StoreSync } from '../pg/store-sync';
import type { AuditEntry, TxAudit } from '../audit/audit.repository';
import { PgAuditRepository } from '../audit/pg-audit.repository';
import { applyDelta, CredentialAudit, CredentialRecord, CredentialRepository, FileShape, RemovalRecord, runOnView, withAudit } from './credential.repository';

const removalKey = (x: Pick<RemovalRecord, 'hostnqn' | 'agent'>) => `${x.hostnqn}\n${x.agent}`;

/**
 * IPXE_CP_STORE=postgres: one row per worker's credential, one per pending removal. Every change
 * (notes too: several control planes share the rows) runs under the credentials lock on the rows
 * as they are now, writes only the rows it changed, stamped with the new version, and notifies
 * the others, which read only the rows (and tombstones) past the version they hold.
 */
@Injectable()
export class PgCredentialRepository extends CredentialRepository implements OnModuleInit, OnModuleDestroy {
  constructor(
    private readonly db: Database,
    private readonly sync: StoreSync,
    @Optional() private readonly audit?: PgAuditRepository,
  ) {
    super();
  }

  async onModuleInit(): Promise<void> {
    await this.db.init();
    await this.db.listen('kurrent_documents', (name) => {
      if (name === '' || name === 'credentials') void this.lock.run(() => this.loadPg()).catch(() => undefined);
    });
    await this.loadPg();
    this.sync.register('credentials', { appliedVersion: () => this.pgVersion, refresh: () => this.lock.run(() => this.loadPg()).then(() => undefined) });
    this.pruneTimer = setInterval(() => void this.pruneTombstones().catch(() => undefined), 10 * 60_000);
    this.pruneTimer.unref();
  }

  private pruneTimer: NodeJS.Timeout | null = null;

  onModuleDestroy(): void {
    if (this.pruneTimer) clearInterval(this.pruneTimer);
  }

  /** The change's audit entries are inserted in its transaction (credentials lock, then the audit lock). */
  change<R>(fn: (d: FileShape, audit: CredentialAudit) => R): Promise<R> {
    const { fn: run, audits } = withAudit(fn);
    return this.lock.run(() => this.mutatePg(run, audits));
  }

  note<R>(fn: (d: FileShape) => R): Promise<R> {
    return this.lock.run(() => this.mutatePg(fn));
  }

  /** Notes are written as they are made. */
  flush(): Promise<void> {
    return Promise.resolve();
  }

  /** The version of the 'credentials' document row every change bumps (StoreSync compares it); this.data holds every row up to it. */
  private pgVersion = 0;
  private loaded = false;

  /**
   * Brings this.data up to the rows' current version: the rows written after the version it
   * holds and the tombstones of rows deleted after it (O(changed rows)); the whole tables only at
   * start or when this process is behind the tombstones kept.
   */
  private async loadPg(c?: PoolClient): Promise<void> {
    const q = c ? c.query.bind(c) : this.db.query.bind(this.db);
    const head = (await q("SELECT name, version FROM documents WHERE name IN ('credentials', 'credential_tombstones_pruned')")).rows as { name: string; version: string }[];
    const version = Number(head.find((r) => r.name === 'credentials')?.version ?? 0);
    const pruned = Number(head.find((r) => r.name === 'credential_tombstones_pruned')?.version ?? 0);
    if (this.loaded && version === this.pgVersion) return;
    if (!this.loaded || this.pgVersion < pruned) {
      const creds = (await q('SELECT worker_id, body FROM credentials')).rows as { worker_id: string; body: CredentialRecord }[];
      const rem = (await q('SELECT body FROM credential_removals ORDER BY hostnqn, agent')).rows as { body: RemovalRecord }[];
      this.data = { version: 1, credentials: Object.fromEntries(creds.map((r) => [r.worker_id, r.body])), removals: rem.map((r) => r.body) };
      this.loaded = true;
    } else {
      const from = this.pgVersion;
      const creds = (await q('SELECT worker_id, body FROM credentials WHERE version > $1', [from])).rows as { worker_id: string; body: CredentialRecord }[];
      const rem = (await q('SELECT body FROM credential_removals WHERE version > $1', [from])).rows as { body: RemovalRecord }[];
      const gone = (await q('SELECT kind, key FROM credential_tombstones WHERE version > $1', [from])).rows as { kind: string; key: string }[];
      const removals = new Map(this.data.removals.map((x) => [removalKey(x), x]));
      for (const t of gone) {
        if (t.kind === 'credential') delete this.data.credentials[t.key];
        else removals.delete(t.key);
      }
      // A row deleted and written again after `from` has both: the row wins.
      for (const r of creds) this.data.credentials[r.worker_id] = r.body;
      for (const r of rem) removals.set(removalKey(r.body), r.body);
      this.data.removals = [...removals.values()];
    }
    this.pgVersion = Math.max(this.pgVersion, version);
    this.revision++;
  }

  private async mutatePg<R>(fn: (d: FileShape) => R, audits: TxAudit[] = []): Promise<R> {
    let audited: AuditEntry[] = [];
    try {
      const { r } = await this.db.tx(async (c) => {
        await this.loadPg(c);
        const { r, delta } = runOnView(this.data, fn);
        if (audits.length) {
          if (!this.audit) throw new Error('a credential change carries audit entries but no audit trail is wired');
          audited = await this.audit.insertInTx(c, audits).catch((e: Error) => {
            throw new ApiError(503, `the database refused the audit entry, nothing was changed: ${e.message}`);
          });
        }
        if (!delta) return { r, version: null };
        const v = await c.query<{ version: string }>(
          "INSERT INTO documents (name, version, body) VALUES ('credentials', 1, '{}') ON CONFLICT (name) DO UPDATE SET version = documents.version + 1 RETURNING version",
        );
        const version = Number(v.rows[0].version);
        const gone: { kind: string; key: string }[] = [];
        const put: [string, string][] = [];
        for (const [id, b] of delta.credentials) {
          if (b === null) gone.push({ kind: 'credential', key: id });
          else put.push([id, JSON.stringify(b)]);
        }
        if (put.length) {
          await c.query(
            'INSERT INTO credentials (worker_id, body, version) SELECT w, b, $3 FROM unnest($1::text[], $2::jsonb[]) AS x(w, b) ON CONFLICT (worker_id) DO UPDATE SET body = excluded.body, version = excluded.version',
            [put.map((p) => p[0]), put.map((p) => p[1]), version],
          );
        }
        if (gone.length) await c.query('DELETE FROM credentials WHERE worker_id = ANY($1::text[])', [gone.map((g) => g.key)]);
        if (delta.removals) {
          const before = new Map(this.data.removals.map((x) => [removalKey(x), x]));
          const after = new Map(delta.removals.map((x) => [removalKey(x), x]));
          for (const [k, x] of before) {
            if (after.has(k)) continue;
            await c.query('DELETE FROM credential_removals WHERE hostnqn = $1 AND agent = $2', [x.hostnqn, x.agent]);
            gone.push({ kind: 'removal', key: k });
          }
          for (const [k, x] of after) {
            if (JSON.stringify(before.get(k)) === JSON.stringify(x)) continue;
            await c.query(
              'INSERT INTO credential_removals (worker_id, hostnqn, agent, body, version) VALUES ($1, $2, $3, $4, $5) ON CONFLICT (hostnqn, agent) DO UPDATE SET worker_id = excluded.worker_id, body = excluded.body, version = excluded.version',
              [x.worker_id, x.hostnqn, x.agent, JSON.stringify(x), version],
            );
          }
        }
        if (gone.length) {
          await c.query('INSERT INTO credential_tombstones (version, kind, key) SELECT $1, k, y FROM unnest($2::text[], $3::text[]) AS x(k, y)', [version, gone.map((g) => g.kind), gone.map((g) => g.key)]);
        }
        await c.query('SELECT pg_notify($1, $2)', ['kurrent_documents', 'credentials']);
        // The state moves only once the transaction is committed (db.tx returns).
        return { r, version, delta };
      }, LOCK.credentials).then((x) => {
        if (x.version !== null && x.delta) {
          applyDelta(this.data, x.delta);
          this.pgVersion = Math.max(this.pgVersion, x.version);
          this.revision++;
        }
        return x;
      });
      if (audited.length) this.audit!.published(audited);
      return r;
    } catch (e) {
      throw e instanceof Error && 'code' in e ? new ApiError(503, `the database is unavailable: ${e.message}`) : e;
    }
  }

  /**
   * Tombstones only have to reach processes that were away a short while: an hour of them is
   * kept, and a process further behind reloads the tables (the pruned-through version says so).
   */
  private async pruneTombstones(): Promise<void> {
    await this.db.tx(async (c) => {
      const r = await c.query<{ v: string | null }>("DELETE FROM credential_tombstones WHERE at < now() - interval '1 hour' RETURNING version AS v");
      const top = Math.max(0, ...r.rows.map((x) => Number(x.v)));
      if (top) {
        await c.query(
          "INSERT INTO documents (name, version, body) VALUES ('credential_tombstones_pruned', $1, '{}') ON CONFLICT (name) DO UPDATE SET version = greatest(documents.version, excluded.version)",
          [top],
        );
      }
    }, LOCK.credentials);
  }
}
