import { Injectable, Logger, OnApplicationShutdown, OnModuleInit, Optional } from '@nestjs/common';
import type { PoolClient } from 'pg';
import { ApiError } from '../../shared/http/api-error';
import { Database, LOCK } from '../repositories/pg/database';
import { StoreSync } from '../repositories/store-sync';
import * as path from 'node:path';
import { dhchapKeyError } from '../../shared/nvme-keys';
import { AppConfig } from '../config/app-config';
import { FileChangedError, FileSystem, sameStamp, type FileStamp } from '../../shared/files/file-system';
import { LedgerFileError } from '../../shared/files/ledger-map';
import { Mutex } from '../../shared/files/mutex';
import { storageFailure } from '../../shared/files/storage-error';

export const PUSH_STATES = ['pushed', 'pending', 'failed', 'removing'] as const;
export type PushState = (typeof PUSH_STATES)[number];

/** Where one worker's credential stands on one agent. No secret in here. */
export interface PushRecord {
  state: PushState;
  attempts: number;
  last_error: string | null;
  last_attempt_at: string | null;
  next_attempt_at: string | null;
  /** 12-hex hash of the key the agent last accepted (null: never). */
  key_sha256: string | null;
  /** Subsystems the agent last linked to the host. */
  subsystems: string[];
  /** The last failure was the agent saying no (an HTTP error), not the agent being away. */
  rejected?: boolean;
}

export interface CredentialRecord {
  worker_id: string;
  hostnqn: string;
  /** The secret (`DHHC-1:..`); the TLS PSK is derived from it, never stored. */
  dhchap_key: string;
  issued_at: string;
  revoked: boolean;
  revoked_at: string | null;
  agents: Record<string, PushRecord>;
  /** The incarnation of the worker it was issued to (WorkerRecord.incarnation; absent for older workers). */
  worker_incarnation?: string | null;
}

/** A credential belongs to the worker of its id only if issued to that incarnation of it. */
export function issuedTo(c: CredentialRecord, w: { incarnation?: string } | undefined): boolean {
  return !!w && (c.worker_incarnation ?? null) === (w.incarnation ?? null);
}

/** A host to take off an agent after its worker was deleted. */
export interface RemovalRecord {
  worker_id: string;
  hostnqn: string;
  agent: string;
  attempts: number;
  last_error: string | null;
  last_attempt_at: string | null;
  next_attempt_at: string | null;
}

export interface FileShape {
  version: 1;
  credentials: Record<string, CredentialRecord>;
  removals: RemovalRecord[];
}

export const newPush = (): PushRecord => ({ state: 'pending', attempts: 0, last_error: null, last_attempt_at: null, next_attempt_at: null, key_sha256: null, subsystems: [] });

/**
 * state/nvme-credentials.json: the only place the control plane keeps NVMe secrets. Mode 0600,
 * replaced atomically (temp, fsync, rename) on every change, read once at start. Changes run
 * one at a time (`change`), and a change is visible only once it is on disk.
 */
@Injectable()
export class CredentialStore implements OnModuleInit, OnApplicationShutdown {
  private readonly log = new Logger('CredentialStore');
  readonly file: string;
  private data: FileShape = { version: 1, credentials: {}, removals: [] };
  /** Bumped by every change and note: cached boot answers depend on the credentials and push states. */
  revision = 0;
  private readonly lock = new Mutex();

  private readonly flushMs: number;

  constructor(
    config: AppConfig,
    private readonly fs: FileSystem,
    @Optional() private readonly db?: Database,
    @Optional() private readonly sync?: StoreSync,
  ) {
    this.file = path.join(config.stateDir, 'nvme-credentials.json');
    this.flushMs = Math.min(config.checkpointMs, 200);
  }

  async onModuleInit(): Promise<void> {
    if (this.db?.enabled) {
      await this.db.init();
      await this.db.listen('kurrent_documents', (name) => {
        if (name === '' || name === 'credentials') void this.lock.run(() => this.loadPg()).catch(() => undefined);
      });
      await this.loadPg();
      this.sync?.register('credentials', { appliedVersion: () => this.pgVersion, refresh: () => this.lock.run(() => this.loadPg()).then(() => undefined) });
      return;
    }
    this.stamp = this.fs.statSync(this.file);
    this.data = this.parseFile(this.fs.readTextSync(this.file));
    this.revision++;
  }

  /** nvme-credentials.json as last read or written by this process (a different stamp: a hand edit). */
  private stamp: FileStamp | null = null;

  /** Validates the file's text; messages name the worker and the field, never a value. */
  private parseFile(text: string | null): FileShape {
    if (text === null) return { version: 1, credentials: {}, removals: [] };
    let obj: Partial<FileShape>;
    try {
      obj = JSON.parse(text) as Partial<FileShape>;
    } catch (e) {
      throw new LedgerFileError(this.file, 1, `invalid JSON: ${(e as Error).message}`);
    }
    for (const [id, c] of Object.entries(obj.credentials ?? {})) {
      // The message names the worker, never the value.
      if (typeof c?.dhchap_key !== 'string' || dhchapKeyError(c.dhchap_key)) throw new LedgerFileError(this.file, 1, `credentials.${id}.dhchap_key is not a DHHC-1 secret`);
      if (typeof c.hostnqn !== 'string') throw new LedgerFileError(this.file, 1, `credentials.${id}.hostnqn is missing`);
      c.agents ??= {};
    }
    return { version: 1, credentials: obj.credentials ?? {}, removals: obj.removals ?? [] };
  }

  /**
   * A hand edit of the file since this process last read or wrote it becomes the state (it is
   * never written over); push bookkeeping not yet flushed is then re-derived by the reconciler.
   * A broken edit refuses the change, naming the file, until it is fixed.
   */
  private pickUpHandEdit(): void {
    const st = this.fs.statSync(this.file);
    if (sameStamp(st, this.stamp)) return;
    let next: FileShape;
    try {
      next = this.parseFile(this.fs.readTextSync(this.file));
    } catch (e) {
      if (e instanceof LedgerFileError) throw new ApiError(500, `${e.message}; fix the hand edit, nothing was changed`);
      throw e;
    }
    this.log.warn(`picked up a hand edit of ${this.file}`);
    this.data = next;
    this.stamp = st;
    this.dirty = false;
    this.revision++;
  }

  /** Everything, secrets included (store export: the bundle is as sensitive as this store). */
  snapshot(): FileShape {
    return structuredClone(this.data);
  }

  get(workerId: string): CredentialRecord | undefined {
    return this.data.credentials[workerId];
  }

  all(): CredentialRecord[] {
    return Object.values(this.data.credentials);
  }

  removals(): RemovalRecord[] {
    return this.data.removals;
  }

  /**
   * Runs fn on a copy of the state, one change at a time, and makes the result durable before it
   * becomes the state. A failed write leaves the previous state in place. For secrets and what
   * operators did (issue, rotate, revoke, delete).
   */
  change<R>(fn: (d: FileShape) => R): Promise<R> {
    if (this.db?.enabled) return this.lock.run(() => this.mutatePg(fn));
    return this.lock.run(async () => {
      for (let attempt = 1; ; attempt++) {
        this.pickUpHandEdit();
        const next = structuredClone(this.data);
        const r = fn(next);
        try {
          await this.write(next);
        } catch (e) {
          if (e instanceof FileChangedError && attempt < 3) continue; // edited meanwhile: picked up, run again
          throw e;
        }
        this.data = next;
        this.revision++;
        return r;
      }
    });
  }

  /**
   * Push bookkeeping (states, attempts, retry times): applied at once, written by one coalesced
   * write shortly after. A crash may lose the last of it; the reconciler re-derives it from what
   * the agents list (a lost "pushed" is found as drift, a lost "failed" is retried), so a fleet-wide
   * push costs a few file writes, not one per host.
   */
  note<R>(fn: (d: FileShape) => R): Promise<R> {
    if (this.db?.enabled) return this.lock.run(() => this.mutatePg(fn));
    return this.lock.run(async () => {
      this.pickUpHandEdit();
      const r = fn(this.data);
      this.revision++;
      // IPXE_CP_CHECKPOINT_MS=0 (the ledger's write-every-commit mode, used by tests): inline too.
      if (this.flushMs === 0) {
        await this.write(this.data).catch((e: unknown) => {
          if (!(e instanceof FileChangedError)) throw e;
          this.pickUpHandEdit(); // the edit wins over bookkeeping; the reconciler re-derives it
        });
      }
      else this.scheduleFlush();
      return r;
    });
  }

  /** Writes what note() changed (also at shutdown). */
  flush(): Promise<void> {
    return this.lock.run(async () => {
      if (!this.dirty) return;
      this.dirty = false;
      try {
        await this.write(this.data);
      } catch (e) {
        // Edited since: the edit is the state now (see pickUpHandEdit); the notes are re-derived.
        if (e instanceof FileChangedError) this.pickUpHandEdit();
        else throw e;
      }
    });
  }

  async onApplicationShutdown(): Promise<void> {
    if (this.db?.enabled) return;
    if (this.timer) clearTimeout(this.timer);
    await this.flush().catch(() => undefined);
  }

  private dirty = false;
  private timer: NodeJS.Timeout | null = null;

  private scheduleFlush(): void {
    this.dirty = true;
    if (this.timer) return;
    this.timer = setTimeout(() => {
      this.timer = null;
      void this.flush().catch(() => {
        this.dirty = true; // retried with the next note
      });
    }, this.flushMs);
    this.timer.unref();
  }

  // ---- IPXE_CP_STORE=postgres: one row per worker's credential, one per pending removal. Every
  // change (notes too: several control planes share the rows) runs under the credentials lock on
  // the rows as they are now, writes only the rows it changed and notifies the others.

  /** The version of the 'credentials' document row every change bumps (StoreSync compares it). */
  private pgVersion = 0;

  private async loadPg(c?: PoolClient): Promise<FileShape> {
    const q = c ? c.query.bind(c) : this.db!.query.bind(this.db);
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
      const { r, next, version } = await this.db!.tx(async (c) => {
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

  private async write(d: FileShape): Promise<void> {
    try {
      await this.fs.writeAtomic(this.file, JSON.stringify(d, null, 2) + '\n', 0o600, { unchangedSince: this.stamp });
    } catch (e) {
      if (e instanceof FileChangedError) throw e;
      throw storageFailure(e, 'nvme-credentials.json');
    }
    this.stamp = this.fs.statSync(this.file);
  }
}
