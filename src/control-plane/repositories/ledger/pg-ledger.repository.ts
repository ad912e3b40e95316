import { BeforeApplicationShutdown, Injectable, OnModuleInit } from '@nestjs/common';
import type { PoolClient } from 'pg';
import { FileSystem } from '../../../shared/files/file-system';
import { ApiError } from '../../../shared/http/api-error';
import { AppConfig } from '../../config/app-config';
import type { AuditEntry } from '../audit/audit.repository';
import { PgAuditRepository } from '../audit/pg-audit.repository';
import { Database, jsonParam, LOCK } from '../pg/database';
import { StoreSync } from '../pg/store-sync';
import { LedgerRepository, Tx } from './ledger.repository';
import { DeviceRecord, emptyFingerprint, Fingerprint, FINGERPRINT_FIELDS, WorkerRecord } from './records';

/** Devices a statement of a telemetry flush updates at most (their parameters stay well under 128 KB). */
export const TELEMETRY_PER_STATEMENT = 250;

/**
 * The tables are the truth, memory a cache of them. Every commit of every control plane takes
 * the ledger's advisory lock, catches this cache up to the last committed change, runs the
 * transaction against it, writes the changed rows and one ledger_changes row, and commits:
 * writers are serialised across processes exactly as the write lock serialises them inside
 * one, and the unique index and foreign key make any slip a failed commit, never a broken
 * invariant. Reads (the boot path included) are served from memory, which the other
 * processes' commits reach through NOTIFY kurrent_ledger (milliseconds; a lost connection
 * catches up in full on reconnect, and every commit catches up first anyway).
 */
@Injectable()
export class PgLedgerRepository extends LedgerRepository implements OnModuleInit, BeforeApplicationShutdown {
  /** The id of the last ledger_changes row applied to memory. */
  private version = 0;
  private catching: Promise<void> | null = null;
  private again = false;

  constructor(
    config: AppConfig,
    fs: FileSystem,
    private readonly audit: PgAuditRepository,
    private readonly db: Database,
    private readonly sync: StoreSync,
  ) {
    super(config, fs);
  }

  async onModuleInit(): Promise<void> {
    await this.db.init();
    await this.db.listen('kurrent_ledger', (payload) => {
      const [id, origin] = payload.split(' ');
      if (origin === this.config.nodeId && Number(id) <= this.version) return;
      this.scheduleCatchUp();
    });
    await this.reloadPg();
    // NOTIFY can be lost silently: StoreSync checks the feed's newest id every IPXE_CP_SYNC_MS.
    this.sync.register('ledger', { appliedVersion: () => this.version, refresh: () => this.lock.run(() => this.catchUp()) });
    // The feed only has to reach processes that were away a short while (others reload in full):
    // an hour of it is kept, and always the newest row, the version every process starts from.
    this.pruneTimer = setInterval(() => {
      void this.db.query("DELETE FROM ledger_changes WHERE at < now() - interval '1 hour' AND id < (SELECT max(id) FROM ledger_changes)").catch(() => undefined);
    }, 10 * 60_000);
    this.pruneTimer.unref();
  }

  private pruneTimer: NodeJS.Timeout | null = null;

  /** Everything from the tables (start, or a cache too far behind the pruned feed). */
  private async reloadPg(c?: PoolClient): Promise<void> {
    const q = c ? c.query.bind(c) : this.db.query.bind(this.db);
    const version = Number((await q('SELECT coalesce(max(id), 0) AS v FROM ledger_changes')).rows[0].v);
    // Both tables at once (two pool connections at start): the server sends one while this process parses the other.
    const [devRows, wkRows] = await Promise.all([q('SELECT mac, data FROM devices'), q('SELECT worker_id, data FROM workers')]);
    const devs = devRows.rows as { mac: string; data: DeviceRecord }[];
    const wks = wkRows.rows as { worker_id: string; data: WorkerRecord }[];
    // Keys gone from the tables (nothing to drop at start, when memory is empty).
    if (this.devices.size) {
      const dm = new Set(devs.map((r) => r.mac));
      for (const k of [...this.devices.entries()].map(([k]) => k)) if (!dm.has(k)) this.devices.replay(k, undefined);
    }
    if (this.workers.size) {
      const wm = new Set(wks.map((r) => r.worker_id));
      for (const k of [...this.workers.entries()].map(([k]) => k)) if (!wm.has(k)) this.workers.replay(k, undefined);
    }
    for (const r of devs) this.devices.replay(r.mac, r.data);
    for (const r of wks) this.workers.replay(r.worker_id, r.data);
    this.version = version;
    this.invalidate();
    this.externalChange();
  }

  private scheduleCatchUp(): void {
    if (this.catching) {
      this.again = true;
      return;
    }
    this.catching = this.lock
      .run(() => this.catchUp())
      .catch((err) => this.log.warn(`catching up with the database failed (${(err as Error).message}); the next commit or notification retries`))
      .finally(() => {
        this.catching = null;
        if (this.again && !this.closing) {
          this.again = false;
          this.scheduleCatchUp();
        }
      });
  }

  /**
   * Applies the commits of other processes since our version: their keys' current rows. Keys that
   * only telemetry flushes touched (every boot of a known machine, through the other control
   * plane) read the four telemetry fields and update the record in memory (applyTelemetry), so a
   * storm through two control planes neither re-reads whole records nor leaves a replaced copy
   * per boot as old-generation garbage (issue 27).
   */
  private async catchUp(c?: PoolClient): Promise<void> {
    const q = c ? c.query.bind(c) : this.db.query.bind(this.db);
    const rows = (await q('SELECT id, devices, workers, telemetry FROM ledger_changes WHERE id > $1 ORDER BY id', [this.version])).rows as ChangeRow[];
    if (!rows.length) return;
    // Pruned past us: the feed no longer says what changed.
    if (Number(rows[0].id) !== this.version + 1) {
      const min = Number((await q('SELECT min(id) AS m FROM ledger_changes')).rows[0].m);
      if (min > this.version + 1) return this.reloadPg(c);
    }
    const { whole, telemetry } = splitChanges(rows, (k) => this.devices.has(k));
    const wk = [...new Set(rows.flatMap((r) => r.workers))];
    const d = new Map<string, DeviceRecord | undefined>(whole.map((k) => [k, undefined]));
    const w = new Map<string, WorkerRecord | undefined>(wk.map((k) => [k, undefined]));
    if (whole.length) for (const r of (await q('SELECT mac, data FROM devices WHERE mac = ANY($1)', [whole])).rows as { mac: string; data: DeviceRecord }[]) d.set(r.mac, r.data);
    if (wk.length) for (const r of (await q('SELECT worker_id, data FROM workers WHERE worker_id = ANY($1)', [wk])).rows as { worker_id: string; data: WorkerRecord }[]) w.set(r.worker_id, r.data);
    const tel = telemetry.length
      ? ((await q("SELECT mac, data->>'uuid' AS uuid, data->'fingerprint' AS fingerprint, data->>'first_seen' AS first_seen, data->>'last_seen' AS last_seen FROM devices WHERE mac = ANY($1)", [telemetry])).rows as TelemetryRow[])
      : [];
    // Telemetry this process has not written yet stays on top of what arrives.
    for (const [k, v] of d) {
      const mine = this.devices.dirtyKeys.has(k) ? this.devices.get(k) : undefined;
      if (v && mine) d.set(k, { ...v, uuid: mine.uuid, fingerprint: mine.fingerprint, first_seen: v.first_seen ?? mine.first_seen, last_seen: mine.last_seen });
    }
    this.applyCommitted({ d, w }, false);
    for (const t of tel) this.applyTelemetry(t);
    this.version = Number(rows[rows.length - 1].id);
    this.externalChange();
  }

  /**
   * Another control plane's telemetry of a device this one holds. Only last_seen or first_seen
   * moved (the same machine booting again): in place. A new fingerprint or uuid: a new record
   * (the search texts are cached per record object). No index, feed or boot answer depends on
   * these fields, so none is told. A device deleted since is left to its own change row.
   */
  private applyTelemetry(t: TelemetryRow): void {
    const cur = this.devices.get(t.mac);
    if (!cur) return;
    if (this.devices.dirtyKeys.has(t.mac)) {
      // This process's own newer telemetry stays; only a first_seen it lacks is taken.
      if (cur.first_seen === null && t.first_seen !== null) this.devices.refresh(t.mac, { ...cur, first_seen: t.first_seen });
      return;
    }
    const fp = t.fingerprint ?? emptyFingerprint();
    if (t.uuid === cur.uuid && t.first_seen === cur.first_seen && sameFingerprint(fp, cur.fingerprint)) {
      if (t.last_seen !== cur.last_seen) this.devices.refreshInPlace(t.mac, cur, (r) => (r.last_seen = t.last_seen));
      return;
    }
    this.devices.refresh(t.mac, { ...cur, uuid: t.uuid, fingerprint: fingerprintOf(fp), first_seen: t.first_seen, last_seen: t.last_seen });
  }

  async commit<R>(fn: (tx: Tx) => R | Promise<R>): Promise<R> {
    let result!: R;
    type Done = { d: Map<string, DeviceRecord | undefined>; w: Map<string, WorkerRecord | undefined>; id: number; t0: number };
    let done = null as Done | null;
    let audited: AuditEntry[] = [];
    await this.db.tx(async (c) => {
      await this.catchUp(c);
      const tx = new Tx(this);
      result = await fn(tx);
      const { d, w } = this.changesOf(tx);
      // Under the ledger lock, then the audit lock: ids in commit order, entry and change together.
      if (tx.audits.length) {
        audited = await this.audit
          .insertInTx(c, tx.audits)
          .catch((e: Error) => {
            throw new ApiError(503, `the database refused the audit entry, nothing was changed: ${e.message}`);
          });
      }
      if (!d.size && !w.size) return;
      const t0 = performance.now();
      await this.writeRows(c, d, w);
      const id = Number((await c.query('INSERT INTO ledger_changes (origin, devices, workers) VALUES ($1, $2, $3) RETURNING id', [this.config.nodeId, [...d.keys()], [...w.keys()]])).rows[0].id);
      await c.query('SELECT pg_notify($1, $2)', ['kurrent_ledger', `${id} ${this.config.nodeId}`]);
      done = { d, w, id, t0 };
    }, LOCK.ledger).catch((e) => {
      throw pgFailure(e);
    });
    if (audited.length) this.audit.published(audited);
    const fin = done as Done | null;
    if (!fin) return result;
    const { d, w, id, t0 } = fin;
    // Timed to the COMMIT, the durable point.
    this.observeCommit((performance.now() - t0) / 1000, 'commit');
    this.applyCommitted({ d, w });
    for (const k of d.keys()) this.devices.dirtyKeys.delete(k);
    this.version = id;
    return result;
  }

  private async writeRows(c: PoolClient, d: Map<string, DeviceRecord | undefined>, w: Map<string, WorkerRecord | undefined>): Promise<void> {
    const wDel = [...w].filter(([, v]) => !v).map(([k]) => k);
    const wUp = [...w].filter(([, v]) => v) as [string, WorkerRecord][];
    const dDel = [...d].filter(([, v]) => !v).map(([k]) => k);
    const dUp = [...d].filter(([, v]) => v) as [string, DeviceRecord][];
    if (dDel.length) await c.query('DELETE FROM devices WHERE mac = ANY($1)', [dDel]);
    // Hostnames move between workers inside one commit: free them before the upsert claims them.
    if (wDel.length) await c.query('DELETE FROM workers WHERE worker_id = ANY($1)', [wDel]);
    if (wUp.length) {
      await c.query("UPDATE workers SET hostname = worker_id || '/moving' WHERE worker_id = ANY($1)", [wUp.map(([k]) => k)]);
      await c.query(
        `INSERT INTO workers (worker_id, hostname, data) SELECT * FROM unnest($1::text[], $2::text[], $3::jsonb[])
         ON CONFLICT (worker_id) DO UPDATE SET hostname = excluded.hostname, data = excluded.data`,
        [wUp.map(([k]) => k), wUp.map(([, v]) => v.hostname), wUp.map(([, v]) => JSON.stringify(v))],
      );
    }
    if (dUp.length) {
      // Bindings move between devices inside one commit (a force swap): unbind first, then set.
      await c.query('UPDATE devices SET bound_worker_id = NULL, state = CASE WHEN state = $2 THEN $3 ELSE state END WHERE mac = ANY($1)', [dUp.map(([k]) => k), 'bound', 'pooled']);
      await c.query(
        `INSERT INTO devices (mac, state, bound_worker_id, data) SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::jsonb[])
         ON CONFLICT (mac) DO UPDATE SET state = excluded.state, bound_worker_id = excluded.bound_worker_id, data = excluded.data`,
        [dUp.map(([k]) => k), dUp.map(([, v]) => v.state), dUp.map(([, v]) => v.bound_worker_id ?? null), dUp.map(([, v]) => JSON.stringify(v))],
      );
    }
  }

  /** Report telemetry: merged into the rows (never a stale whole record over another's commit). */
  protected async flushLocked(): Promise<void> {
    if (!this.devices.dirtyKeys.size) return;
    // The set is taken whole (see LedgerMap.takeDirty): a report landing while this writes goes to
    // the next flush; before, the keys were deleted one by one after the write, and a report that
    // landed meanwhile lost its telemetry in the database until the device's next one.
    const taken = this.devices.takeDirty();
    const keys = [...taken].filter((k) => this.devices.has(k));
    if (!keys.length) return;
    const t0 = performance.now();
    let id: number;
    try {
      // Under the ledger lock like every commit, so ledger_changes ids commit in order.
      id = await this.db.tx(async (c) => {
        // TELEMETRY_PER_STATEMENT devices a statement, their fields one JSON parameter (jsonParam).
        for (let i = 0; i < keys.length; i += TELEMETRY_PER_STATEMENT) {
          await c.query(
            `UPDATE devices d SET data = d.data || jsonb_build_object('uuid', u.uuid, 'fingerprint', u.fingerprint, 'last_seen', u.last_seen, 'first_seen', CASE WHEN jsonb_typeof(d.data->'first_seen') = 'string' THEN d.data->'first_seen' ELSE u.first_seen END)
             FROM json_to_recordset($1::json) AS u(mac text, uuid jsonb, fingerprint jsonb, last_seen jsonb, first_seen jsonb) WHERE d.mac = u.mac`,
            [telemetryJson(keys, i, i + TELEMETRY_PER_STATEMENT, this.devices)],
          );
        }
        const row = await c.query('INSERT INTO ledger_changes (origin, devices, workers, telemetry) VALUES ($1, ARRAY(SELECT json_array_elements_text($2::json)), $3, true) RETURNING id', [this.config.nodeId, jsonParam(keys), []]);
        const id = Number(row.rows[0].id);
        await c.query('SELECT pg_notify($1, $2)', ['kurrent_ledger', `${id} ${this.config.nodeId}`]);
        return id;
      }, LOCK.ledger);
    } catch (e) {
      this.devices.restoreDirty(keys);
      throw e;
    }
    this.observeCommit((performance.now() - t0) / 1000, 'telemetry');
    // Our own telemetry row: the cache already holds it; others' rows in between come with the next catch-up.
    if (id === this.version + 1) this.version = id;
  }

  /** PostgreSQL: the last telemetry goes to the database before Database closes its pool. */
  async beforeApplicationShutdown(): Promise<void> {
    this.closing = true;
    if (this.pruneTimer) clearInterval(this.pruneTimer);
    if (this.flushTimer) clearTimeout(this.flushTimer);
    this.flushTimer = null;
    await this.lock.run(() => this.flushLocked()).catch((err) => this.log.error({ err }, 'telemetry flush at shutdown failed'));
  }

  /** Memory is the cache of the tables: no hand edits to pick up. */
  read(): this {
    return this;
  }

  /** The tables are the store: nothing to checkpoint. */
  checkpoint(): Promise<void> {
    return Promise.resolve();
  }
}

type ChangeRow = {
  id: string;
  devices: string[];
  workers: string[];
  /** Written by a telemetry flush: only uuid, fingerprint, first_seen and last_seen of these devices moved. */
  telemetry: boolean;
};

type TelemetryRow = {
  mac: string;
  uuid: string | null;
  fingerprint: Partial<Fingerprint> | null;
  first_seen: string | null;
  last_seen: string | null;
};

/**
 * The device keys of a run of change rows: those any commit touched (or that memory does not
 * hold) are read whole; those only telemetry flushes touched, their telemetry fields.
 */
export function splitChanges(rows: readonly Pick<ChangeRow, 'devices' | 'telemetry'>[], held: (mac: string) => boolean): { whole: string[]; telemetry: string[] } {
  const whole = new Set<string>();
  const telemetry = new Set<string>();
  for (const r of rows) for (const k of r.devices) (r.telemetry ? telemetry : whole).add(k);
  for (const k of telemetry) {
    if (whole.has(k)) telemetry.delete(k);
    else if (!held(k)) {
      telemetry.delete(k);
      whole.add(k);
    }
  }
  return { whole: [...whole], telemetry: [...telemetry] };
}

const sameFingerprint = (a: Partial<Fingerprint>, b: Fingerprint): boolean => FINGERPRINT_FIELDS.every((f) => (a[f] ?? null) === b[f]);

/** In the validator's field order (jsonb keeps its own), so every fingerprint has one shape. */
function fingerprintOf(x: Partial<Fingerprint>): Fingerprint {
  const fp = emptyFingerprint();
  for (const f of FINGERPRINT_FIELDS) (fp[f] as string | number | null) = x[f] ?? null;
  return fp;
}

/** A database failure as the API reports storage failures: unavailable (503), invariants (409). */
function pgFailure(e: unknown): unknown {
  if (e instanceof ApiError) return e;
  const code = (e as { code?: string }).code;
  if (code === '23505' || code === '23503' || code === '23514') return new ApiError(409, `the database refused the change: ${(e as Error).message}`);
  if (typeof code === 'string' && /^(08|57P|53)/.test(code)) return new ApiError(503, `the database is unavailable: ${(e as Error).message}`);
  if ((e as { errno?: number; syscall?: string }).syscall) return new ApiError(503, `the database is unreachable: ${(e as Error).message}`);
  return e;
}

/** The telemetry of keys[from..to) for json_to_recordset, absent fields null. */
function telemetryJson(keys: string[], from: number, to: number, devices: { get(k: string): DeviceRecord | undefined }): Buffer {
  const rows: TelemetryRow[] = [];
  for (let i = from; i < Math.min(to, keys.length); i++) {
    const d = devices.get(keys[i])!;
    rows.push({ mac: keys[i], uuid: d.uuid ?? null, fingerprint: d.fingerprint ?? null, first_seen: d.first_seen ?? null, last_seen: d.last_seen ?? null });
  }
  return jsonParam(rows);
}
