import { Injectable, OnModuleInit } from '@nestjs/common';
import type { PoolClient } from 'pg';
import { ApiError } from '../../../shared/http/api-error';
import { Database, LOCK } from '../pg/database';
import { StoreSync } from '../pg/store-sync';
import { CredentialRecord, CredentialRepository, FileShape, RemovalRecord } from './credential.repository';

/**
 * IPXE_CP_STORE=postgres: one row per worker's credential, one per pending removal. Every change
 * (notes too: several control planes share the rows) runs under the credentials lock on the rows
 * as they are now, writes only the rows it changed and notifies the others.
 */
@Injectable()
export class PgCredentialRepository extends CredentialRepository implements OnModuleInit {
  constructor(
    private readonly db: Database,
    private readonly sync: StoreSync,
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
  }

  change<R>(fn: (d: FileShape) => R): Promise<R> {
    return this.lock.run(() => this.mutatePg(fn));
  }

  note<R>(fn: (d: FileShape) => R): Promise<R> {
    return this.lock.run(() => this.mutatePg(fn));
  }

  /** Notes are written as they are made. */
  flush(): Promise<void> {
    return Promise.resolve();
  }

  /** The version of the 'credentials' document row every change bumps (StoreSync compares it). */
  private pgVersion = 0;

  private async loadPg(c?: PoolClient): Promise<FileShape> {
    const q = c ? c.query.bind(c) : this.db.query.bind(this.db);
    const v = (await q("SELECT version FROM documents WHERE name = 'credentials'")).rows as { version: string }[];
    this.pgVersion = Math.max(this.pgVersion, Number(v[0]?.version ?? 0));
    const creds = (await q('SELECT worker_id, body FROM credentials')).rows as { worker_id: string; body: CredentialRecord }[];
    const rem = (await q('SELECT body FROM credential_removals ORDER BY hostnqn, agent')).rows as { body: RemovalRecord }[];
    const next: FileShape = { version: 1, credentials: Object.fromEntries(creds.map((r) => [r.worker_id, r.body])), removals: rem.map((r) => r.body) };
    if (JSON.stringify(next) !== JSON.stringify(this.data)) {
      this.data = next;
      this.revision++;
    }
    return next;
  }

  private async mutatePg<R>(fn: (d: FileShape) => R): Promise<R> {
    try {
      const { r, next, version } = await this.db.tx(async (c) => {
        const cur = await this.loadPg(c);
        const next = structuredClone(cur);
        const r = fn(next);
        const ids = new Set([...Object.keys(cur.credentials), ...Object.keys(next.credentials)]);
        for (const id of ids) {
          const a = cur.credentials[id];
          const b = next.credentials[id];
          if (JSON.stringify(a) === JSON.stringify(b)) continue;
          if (!b) await c.query('DELETE FROM credentials WHERE worker_id = $1', [id]);
          else await c.query('INSERT INTO credentials (worker_id, body) VALUES ($1, $2) ON CONFLICT (worker_id) DO UPDATE SET body = excluded.body', [id, JSON.stringify(b)]);
        }
        const key = (x: RemovalRecord) => `${x.hostnqn}\n${x.agent}`;
        const before = new Map(cur.removals.map((x) => [key(x), x]));
        const after = new Map(next.removals.map((x) => [key(x), x]));
        for (const [k, x] of before) if (!after.has(k)) await c.query('DELETE FROM credential_removals WHERE hostnqn = $1 AND agent = $2', [x.hostnqn, x.agent]);
        for (const [k, x] of after) {
          if (JSON.stringify(before.get(k)) === JSON.stringify(x)) continue;
          await c.query(
            'INSERT INTO credential_removals (worker_id, hostnqn, agent, body) VALUES ($1, $2, $3, $4) ON CONFLICT (hostnqn, agent) DO UPDATE SET worker_id = excluded.worker_id, body = excluded.body',
            [x.worker_id, x.hostnqn, x.agent, JSON.stringify(x)],
          );
        }
        const v = await c.query<{ version: string }>(
          "INSERT INTO documents (name, version, body) VALUES ('credentials', 1, '{}') ON CONFLICT (name) DO UPDATE SET version = documents.version + 1 RETURNING version",
        );
        await c.query('SELECT pg_notify($1, $2)', ['kurrent_documents', 'credentials']);
        return { r, next, version: Number(v.rows[0].version) };
      }, LOCK.credentials);
      this.pgVersion = Math.max(this.pgVersion, version);
      this.data = next;
      this.revision++;
      return r;
    } catch (e) {
      throw e instanceof Error && 'code' in e ? new ApiError(503, `the database is unavailable: ${e.message}`) : e;
    }
  }

}
