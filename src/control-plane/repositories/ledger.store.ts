import { BeforeApplicationShutdown, Injectable, Logger, OnApplicationBootstrap, Optional, OnApplicationShutdown, OnModuleInit } from '@nestjs/common';
import * as path from 'node:path';
import { AuditEntry, AuditFields, AuditService, TxAudit } from '../audit/audit.service';
import { ApiError } from '../../shared/http/api-error';
import { AppConfig } from '../config/app-config';
import { ChangeLog, ChangeRecord } from './change-log';
import { FileChangedError, FileSystem } from '../../shared/files/file-system';
import { LedgerFileError, LedgerMap, lineOfKey, type Validator } from '../../shared/files/ledger-map';
import { Mutex } from '../../shared/files/mutex';
import { DeviceRecord, validateDevice, validateWorker, WorkerRecord } from './records';
import { StoreSync } from './store-sync';
import { isStorageFailure, StateInUseError, storageFailure } from '../../shared/files/storage-error';
import { Database, LOCK } from './pg/database';
import type { PoolClient } from 'pg';

interface Change<T> {
  orig: T | undefined;
  next: T | undefined;
}

/** A transaction's view of one ledger file: reads see its own writes, nothing is visible until commit. */
export class TxMap<T extends object> {
  readonly changes = new Map<string, Change<T>>();
  /** What the transaction first read of each key: the common ancestor for the merge. */
  private readonly seen = new Map<string, T | undefined>();
  constructor(private readonly base: LedgerMap<T>) {}

  get(key: string): T | undefined {
    const c = this.changes.get(key);
    if (c) return c.next;
    const v = this.base.get(key);
    if (!this.seen.has(key)) this.seen.set(key, v);
    return v;
  }
  has(key: string): boolean {
    return this.get(key) !== undefined;
  }
  set(key: string, value: T | undefined): void {
    const c = this.changes.get(key);
    if (c) c.next = value;
    else this.changes.set(key, { orig: this.seen.has(key) ? this.seen.get(key) : this.base.get(key), next: value });
  }
  delete(key: string): void {
    this.set(key, undefined);
  }
  *values(): IterableIterator<T> {
    for (const [k, v] of this.base.entries()) {
      const c = this.changes.get(k);
      if (!c) yield v;
      else if (c.next !== undefined) yield c.next;
    }
    for (const [k, c] of this.changes) if (!this.base.has(k) && c.next !== undefined) yield c.next;
  }

  /**
   * Resolves the changes against the current base with a field-level three-way merge, so
   * telemetry written meanwhile by /devices/report (last_seen, fingerprint) is not lost when a
   * transaction commits a record it read earlier.
   */
  resolve(): Map<string, T | undefined> {
    const out = new Map<string, T | undefined>();
    for (const [k, { orig, next }] of this.changes) {
      const cur = this.base.get(k);
      if (next === undefined || orig === undefined || cur === undefined || cur === orig) {
        out.set(k, next);
        continue;
      }
      const merged: Record<string, unknown> = { ...(cur as Record<string, unknown>) };
      const o = orig as Record<string, unknown>;
      const n = next as Record<string, unknown>;
      for (const f of new Set([...Object.keys(o), ...Object.keys(n)])) if (n[f] !== o[f]) merged[f] = n[f];
      out.set(k, merged as T);
    }
    return out;
  }
}

export class Tx {
  readonly devices: TxMap<DeviceRecord>;
  readonly workers: TxMap<WorkerRecord>;
  /** Audit entries written with the change, atomically (the same transaction, or change-log record). */
  readonly audits: TxAudit[] = [];
  audit(op: string, fields: AuditFields = {}): void {
    this.audits.push({ op, fields });
  }
  constructor(store: LedgerStore) {
    this.devices = new TxMap(store.devices);
    this.workers = new TxMap(store.workers);
  }
}

const DEVICES_HEADER = [
  '# Kurrent device ledger: the authority for device <-> worker bindings (bound_worker_id).',
  '# One device per line in JSON flow style (valid YAML). Hand edits are picked up within a',
  '# second and merged key by key; any YAML layout is accepted, this one loads fastest.',
].join('\n');
const WORKERS_HEADER = [
  '# Kurrent worker ledger: identity, system disks, install CD and default boot of each worker.',
  '# One worker per line in JSON flow style (valid YAML). Hand edits are picked up within a',
  '# second and merged key by key; any YAML layout is accepted, this one loads fastest.',
].join('\n');

/** A repair the store made to keep an invariant (start-up or hand edit); audited as ledger.repair. */
export interface LedgerRepair {
  mac: string;
  worker_id: string;
  reason: string;
}

interface Registration {
  mac: string;
  /** The new record given the current one (undefined: unknown MAC), or null to change nothing. */
  apply: (cur: DeviceRecord | undefined) => DeviceRecord | null;
  /** Called when the batch that applied this change failed to commit. */
  undo?: () => void;
  /** Written with the change when it applies (same record or transaction). */
  audit?: TxAudit;
  /** A new device is refused when this many are pooled, counting the batch's own (exact under a burst). */
  poolLimit?: number;
  resolve: (changed: boolean) => void;
  reject: (e: unknown) => void;
}

const obj = <T>(m: Map<string, T | undefined>): Record<string, T | null> => {
  const o: Record<string, T | null> = {};
  for (const [k, v] of m) o[k] = v ?? null;
  return o;
};

/** See LedgerStore.onBootChange. */
export interface BootChange {
  full: boolean;
  macs: string[];
  workers: string[];
  hostnames: string[];
}

/** Report telemetry of a device record: written by reports, never what a hand edit and a commit disagree on. */
const TELEMETRY_FIELDS = new Set(['uuid', 'fingerprint', 'first_seen', 'last_seen']);
/** A ledger record without its telemetry (top-level fields only; worker records have none). */
const ledgerFacts = (r: DeviceRecord | WorkerRecord | undefined): string =>
  r ? JSON.stringify(Object.fromEntries(Object.entries(r).filter(([k]) => !TELEMETRY_FIELDS.has(k)))) : '';

/** The part of a device record a boot answer depends on. */
const bootFieldsOf = (d: DeviceRecord | undefined): string => (d ? `${d.state}\0${d.bound_worker_id ?? ''}` : '');

/**
 * The file ledger. devices.yml and workers.yml are held in memory; every commit is first one
 * fdatasync'ed record in state/ledger.wal (the commit point, so a commit is all-or-nothing
 * across both files whatever moment the process dies) and only then visible. The YAML files are
 * checkpoints of memory, rewritten a quiet moment after the last commit (IPXE_CP_CHECKPOINT_MS),
 * when the log outgrows IPXE_CP_CHECKPOINT_BYTES and at shutdown, so the cost of one mutation
 * does not grow with the ledger. The dnsmasq projection is derived and re-derived at start.
 *
 * Durability: every transaction and every device registration is on disk before it is
 * acknowledged (registrations of a storm share one fsync). Pure telemetry of known devices
 * (last_seen, fingerprint, uuid) is logged in batches every IPXE_CP_REPORT_FLUSH_MS and may be
 * lost in a crash within that window.
 *
 * Hand edits are never overwritten: before any write the files are checked against what was last
 * read or written; a changed file is merged key by key (the edit wins where both sides changed);
 * a corrupt one blocks every write (commits, telemetry, checkpoints) until fixed.
 */
@Injectable()
export class LedgerStore implements OnModuleInit, OnApplicationBootstrap, BeforeApplicationShutdown, OnApplicationShutdown {
  private readonly log = new Logger('LedgerStore');
  readonly lock = new Mutex();
  readonly devices: LedgerMap<DeviceRecord>;
  readonly workers: LedgerMap<WorkerRecord>;
  readonly wal: ChangeLog;
  private readonly lockFile: string;
  private lastRefresh = 0;
  private flushTimer: NodeJS.Timeout | null = null;
  private checkpointTimer: NodeJS.Timeout | null = null;
  private firstUncheckpointed = 0;
  /** The highest audit id a change-log record carries since the last checkpoint. */
  private walAuditMax = 0;
  private closing = false;
  private regQueue: Registration[] = [];
  private regScheduled = false;
  private readonly listeners: (() => void)[] = [];
  private repairs: LedgerRepair[] = [];
  private bootstrapped = false;
  /**
   * Indexes kept up to date commit by commit (null = rebuild on next use, after a load, a replay
   * or a hand edit), so no mutation pays for a scan of the whole ledger.
   */
  private bindIdx: Map<string, string> | null = null;
  private hostIdx: Map<string, string> | null = null;
  private pooledN: number | null = null;
  /** Keys changed since the projection (dhcp-hosts.conf) last took them; full = re-derive all. */
  private feed = { full: true, d: new Set<string>(), w: new Set<string>() };

  /**
   * IPXE_CP_STORE=postgres: memory is a cache of the database, the id of the last ledger_changes
   * row applied. See commitPg and catchUp.
   */
  private pg: { version: number; catching: Promise<void> | null; again: boolean } | null = null;

  constructor(
    private readonly config: AppConfig,
    private readonly fs: FileSystem,
    @Optional() private readonly audit?: AuditService,
    @Optional() private readonly db?: Database,
    @Optional() private readonly sync?: StoreSync,
  ) {
    this.devices = new LedgerMap(path.join(config.stateDir, 'devices.yml'), 'devices', DEVICES_HEADER, validateDevice, fs);
    this.workers = new LedgerMap(path.join(config.stateDir, 'workers.yml'), 'workers', WORKERS_HEADER, validateWorker, fs);
    this.wal = new ChangeLog(path.join(config.stateDir, 'ledger.wal'), fs);
    this.lockFile = path.join(config.stateDir, 'kurrent.lock');
  }

  async onModuleInit(): Promise<void> {
    if (this.db?.enabled) return this.initPg();
    this.fs.mkdirpSync(this.config.stateDir);
    // Two control planes writing one state directory would undo each other's commits.
    const holder = this.fs.lockSync(this.lockFile);
    if (holder !== null) {
      throw new StateInUseError(this.config.stateDir, holder);
    }
    const swept = this.fs.removeStaleTemps(this.config.stateDir);
    if (swept.length) this.log.warn(`removed ${swept.length} temp file(s) a killed process left in ${this.config.stateDir}`);
    this.devices.loadSync();
    this.workers.loadSync();
    const records = this.wal.loadSync();
    this.checkReplay(records);
    records.forEach((r, i) => this.replay(r, i + 1));
    for (const r of records) {
      for (const k of Object.keys(r.d ?? {})) this.walTouched.d.add(k);
      for (const k of Object.keys(r.w ?? {})) this.walTouched.w.add(k);
    }
    // Commits whose audit entries a kill kept out of operations.jsonl: written before the log is emptied.
    const carried = records.flatMap((r) => (r.a ?? []) as AuditEntry[]);
    this.walAuditMax = Math.max(0, ...carried.map((e) => e.id));
    if (carried.length && this.audit) {
      // On a full disk they stay in the change log (the checkpoint keeps it until they are written).
      await this.audit.recover(carried).catch((e: unknown) => {
        if (!isStorageFailure(e)) throw e;
        this.log.warn(`${carried.length} audit entr(ies) of committed changes wait in the change log: ${(e as Error).message}`);
      });
    }
    const { dangling, double } = this.violations(this.devices, this.workers);
    if (double.length) throw this.doubleBinding(double[0], this.fs.readTextSync(this.devices.file) ?? '');
    const fixed = new Map(dangling.map((mac) => [mac, this.devices.get(mac)!] as const));
    this.unbindDangling(fixed, dangling, 'bound to a worker that does not exist; returned to the pool');
    for (const [mac, d] of fixed) this.devices.replay(mac, d);
    if (records.length || dangling.length) {
      this.log.log(`replayed ${records.length} change-log record(s), repaired ${dangling.length} binding(s)`);
      // A full or read-only state disk must not keep the control plane from starting: every commit
      // is in the change log, boots are answered from memory, writes answer 507/503 until it is fixed.
      await this.checkpointLocked().catch((e: unknown) => {
        this.log.warn(`checkpoint at start failed (${(e as Error).message}); the change log keeps every commit, retried every 5 s`);
      });
    }
  }

  onApplicationBootstrap(): void {
    this.bootstrapped = true;
    this.auditRepairs();
  }

  /** PostgreSQL: the last telemetry goes to the database before Database closes its pool. */
  async beforeApplicationShutdown(): Promise<void> {
    if (!this.pg) return;
    this.closing = true;
    if (this.pruneTimer) clearInterval(this.pruneTimer);
    if (this.flushTimer) clearTimeout(this.flushTimer);
    this.flushTimer = null;
    await this.lock.run(() => this.flushLocked()).catch((err) => this.log.error({ err }, 'telemetry flush at shutdown failed'));
  }

  async onApplicationShutdown(): Promise<void> {
    if (this.pg) return;
    this.closing = true;
    if (this.flushTimer) clearTimeout(this.flushTimer);
    if (this.checkpointTimer) clearTimeout(this.checkpointTimer);
    this.flushTimer = this.checkpointTimer = null;
    await this.lock.run(async () => {
      await this.flushLocked().catch((err) => this.log.error({ err }, 'telemetry flush at shutdown failed'));
      await this.checkpointLocked().catch((err) => this.log.error({ err }, 'checkpoint at shutdown failed; the change log keeps every commit'));
    });
    this.fs.unlockSync(this.lockFile);
  }

  private readonly commitObservers: ((seconds: number, kind: 'commit' | 'telemetry') => void)[] = [];

  /** Called with the duration of every durable write (the change-log append and its fsync). */
  onCommitted(fn: (seconds: number, kind: 'commit' | 'telemetry') => void): void {
    this.commitObservers.push(fn);
  }


  // ---- IPXE_CP_STORE=postgres -------------------------------------------------------------
  //
  // The tables are the truth, memory a cache of them. Every commit of every control plane takes
  // the ledger's advisory lock, catches this cache up to the last committed change, runs the
  // transaction against it, writes the changed rows and one ledger_changes row, and commits:
  // writers are serialised across processes exactly as the write lock serialises them inside
  // one, and the unique index and foreign key make any slip a failed commit, never a broken
  // invariant. Reads (the boot path included) are served from memory, which the other
  // processes' commits reach through NOTIFY kurrent_ledger (milliseconds; a lost connection
  // catches up in full on reconnect, and every commit catches up first anyway).

  private async initPg(): Promise<void> {
    await this.db!.init();
    this.pg = { version: 0, catching: null, again: false };
    await this.db!.listen('kurrent_ledger', (payload) => {
      const [id, origin] = payload.split(' ');
      if (origin === this.config.nodeId && Number(id) <= this.pg!.version) return;
      this.scheduleCatchUp();
    });
    await this.reloadPg();
    // NOTIFY can be lost silently: StoreSync checks the feed's newest id every IPXE_CP_SYNC_MS.
    this.sync?.register('ledger', { appliedVersion: () => this.pg!.version, refresh: () => this.lock.run(() => this.catchUp()) });
    // The feed only has to reach processes that were away a short while (others reload in full):
    // an hour of it is kept, and always the newest row, the version every process starts from.
    this.pruneTimer = setInterval(() => {
      void this.db!.query("DELETE FROM ledger_changes WHERE at < now() - interval '1 hour' AND id < (SELECT max(id) FROM ledger_changes)").catch(() => undefined);
    }, 10 * 60_000);
    this.pruneTimer.unref();
  }
  private pruneTimer: NodeJS.Timeout | null = null;

  /** Everything from the tables (start, or a cache too far behind the pruned feed). */
  private async reloadPg(c?: PoolClient): Promise<void> {
    const q = c ? c.query.bind(c) : this.db!.query.bind(this.db);
    const version = Number((await q('SELECT coalesce(max(id), 0) AS v FROM ledger_changes')).rows[0].v);
    const devs = (await q('SELECT mac, data FROM devices')).rows as { mac: string; data: DeviceRecord }[];
    const wks = (await q('SELECT worker_id, data FROM workers')).rows as { worker_id: string; data: WorkerRecord }[];
    const dm = new Set(devs.map((r) => r.mac));
    const wm = new Set(wks.map((r) => r.worker_id));
    for (const k of [...this.devices.entries()].map(([k]) => k)) if (!dm.has(k)) this.devices.replay(k, undefined);
    for (const k of [...this.workers.entries()].map(([k]) => k)) if (!wm.has(k)) this.workers.replay(k, undefined);
    for (const r of devs) this.devices.replay(r.mac, r.data);
    for (const r of wks) this.workers.replay(r.worker_id, r.data);
    this.pg!.version = version;
    this.invalidate();
    for (const fn of this.listeners) fn();
  }

  private scheduleCatchUp(): void {
    const pg = this.pg!;
    if (pg.catching) {
      pg.again = true;
      return;
    }
    pg.catching = this.lock
      .run(() => this.catchUp())
      .catch((err) => this.log.warn(`catching up with the database failed (${(err as Error).message}); the next commit or notification retries`))
      .finally(() => {
        pg.catching = null;
        if (pg.again && !this.closing) {
          pg.again = false;
          this.scheduleCatchUp();
        }
      });
  }

  /** Applies the commits of other processes since our version: their keys' current rows. */
  private async catchUp(c?: PoolClient): Promise<void> {
    const pg = this.pg!;
    const q = c ? c.query.bind(c) : this.db!.query.bind(this.db);
    const rows = (await q('SELECT id, devices, workers FROM ledger_changes WHERE id > $1 ORDER BY id', [pg.version])).rows as { id: string; devices: string[]; workers: string[] }[];
    if (!rows.length) return;
    // Pruned past us: the feed no longer says what changed.
    if (Number(rows[0].id) !== pg.version + 1) {
      const min = Number((await q('SELECT min(id) AS m FROM ledger_changes')).rows[0].m);
      if (min > pg.version + 1) return this.reloadPg(c);
    }
    const dk = [...new Set(rows.flatMap((r) => r.devices))];
    const wk = [...new Set(rows.flatMap((r) => r.workers))];
    const d = new Map<string, DeviceRecord | undefined>(dk.map((k) => [k, undefined]));
    const w = new Map<string, WorkerRecord | undefined>(wk.map((k) => [k, undefined]));
    if (dk.length) for (const r of (await q('SELECT mac, data FROM devices WHERE mac = ANY($1)', [dk])).rows as { mac: string; data: DeviceRecord }[]) d.set(r.mac, r.data);
    if (wk.length) for (const r of (await q('SELECT worker_id, data FROM workers WHERE worker_id = ANY($1)', [wk])).rows as { worker_id: string; data: WorkerRecord }[]) w.set(r.worker_id, r.data);
    // Telemetry this process has not written yet stays on top of what arrives.
    for (const [k, v] of d) {
      const mine = this.devices.dirtyKeys.has(k) ? this.devices.get(k) : undefined;
      if (v && mine) d.set(k, { ...v, uuid: mine.uuid, fingerprint: mine.fingerprint, first_seen: v.first_seen ?? mine.first_seen, last_seen: mine.last_seen });
    }
    this.noteChanges(d, w);
    this.devices.apply(d);
    this.workers.apply(w);
    pg.version = Number(rows[rows.length - 1].id);
    for (const fn of this.listeners) fn();
  }

  private async commitPg<R>(fn: (tx: Tx) => R | Promise<R>): Promise<R> {
    let result!: R;
    type Done = { d: Map<string, DeviceRecord | undefined>; w: Map<string, WorkerRecord | undefined>; id: number; t0: number };
    let done = null as Done | null;
    let audited: AuditEntry[] = [];
    await this.db!.tx(async (c) => {
      await this.catchUp(c);
      const tx = new Tx(this);
      result = await fn(tx);
      const d = tx.devices.changes.size ? tx.devices.resolve() : new Map<string, DeviceRecord | undefined>();
      const w = tx.workers.changes.size ? tx.workers.resolve() : new Map<string, WorkerRecord | undefined>();
      // Under the ledger lock, then the audit lock: ids in commit order, entry and change together.
      if (tx.audits.length) {
        audited = await this.requireAudit()
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
    if (audited.length) this.requireAudit().published(audited);
    const fin = done as Done | null;
    if (!fin) return result;
    const { d, w, id, t0 } = fin;
    // Timed to the COMMIT, the durable point.
    for (const ob of this.commitObservers) ob((performance.now() - t0) / 1000, 'commit');
    this.noteChanges(d, w);
    if (d.size) this.devices.apply(d);
    if (w.size) this.workers.apply(w);
    for (const k of d.keys()) this.devices.dirtyKeys.delete(k);
    this.pg!.version = id;
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
  private async flushPg(): Promise<void> {
    const keys = [...this.devices.dirtyKeys].filter((k) => this.devices.has(k));
    if (!keys.length) return;
    const recs = keys.map((k) => this.devices.get(k)!);
    const t0 = performance.now();
    // Under the ledger lock like every commit, so ledger_changes ids commit in order.
    const id = await this.db!.tx(async (c) => {
      await c.query(
        `UPDATE devices d SET data = d.data || jsonb_build_object('uuid', u.uuid, 'fingerprint', u.fp, 'last_seen', u.last_seen, 'first_seen', CASE WHEN jsonb_typeof(d.data->'first_seen') = 'string' THEN d.data->'first_seen' ELSE u.first_seen END)
         FROM unnest($1::text[], $2::jsonb[], $3::jsonb[], $4::jsonb[], $5::jsonb[]) AS u(mac, uuid, fp, last_seen, first_seen) WHERE d.mac = u.mac`,
        [keys, recs.map((r) => JSON.stringify(r.uuid)), recs.map((r) => JSON.stringify(r.fingerprint)), recs.map((r) => JSON.stringify(r.last_seen)), recs.map((r) => JSON.stringify(r.first_seen))],
      );
      const id = Number((await c.query('INSERT INTO ledger_changes (origin, devices, workers) VALUES ($1, $2, $3) RETURNING id', [this.config.nodeId, keys, []])).rows[0].id);
      await c.query('SELECT pg_notify($1, $2)', ['kurrent_ledger', `${id} ${this.config.nodeId}`]);
      return id;
    }, LOCK.ledger);
    for (const ob of this.commitObservers) ob((performance.now() - t0) / 1000, 'telemetry');
    for (const k of keys) this.devices.dirtyKeys.delete(k);
    // Our own telemetry row: the cache already holds it; others' rows in between come with the next catch-up.
    if (id === this.pg!.version + 1) this.pg!.version = id;
  }

  /** Called after a hand edit was merged (the dnsmasq projection re-derives itself). */
  onExternalChange(fn: () => void): void {
    this.listeners.push(fn);
  }

  /** Reads: picks up hand edits at most every 200 ms, never in the middle of a transaction. */
  read(): this {
    if (this.pg) return this;
    const now = performance.now();
    if (now - this.lastRefresh > 200 && !this.lock.busy) {
      this.lastRefresh = now;
      this.syncWithFiles();
    }
    return this;
  }

  /** Picks up hand edits (at most every 200 ms) so that onBootChange listeners hear of them. */
  refreshForBoot(): void {
    this.read();
  }

  /** Work queued by afterRelease while the current holder runs (one holder at a time). */
  private releaseWork: (() => Promise<void>)[] | null = null;

  /**
   * Runs fn under the write lock, then, with the lock released, what fn queued with afterRelease
   * (in order; the first failure is this call's failure, after the rest ran).
   */
  async exclusive<R>(fn: () => Promise<R> | R): Promise<R> {
    const work: (() => Promise<void>)[] = [];
    const r = await this.lock.run(async () => {
      this.releaseWork = work;
      try {
        return await fn();
      } finally {
        this.releaseWork = null;
      }
    });
    let failure: unknown = null;
    for (const w of work) await w().catch((e: unknown) => (failure ??= e));
    if (failure) throw failure;
    return r;
  }

  /**
   * Defers waiting work (a dnsmasq reload) until the current exclusive() has released the lock, so
   * no writer waits for it; outside exclusive() it runs at once.
   */
  afterRelease(fn: () => Promise<void>): Promise<void> {
    if (!this.releaseWork) return fn();
    this.releaseWork.push(fn);
    return Promise.resolve();
  }

  /**
   * Runs fn against a transaction and commits it. Must be called under the lock (exclusive).
   * fn may throw (an ApiError usually): nothing is written then. Resolves once the commit is
   * durable; a storage failure (full disk: 507, read-only: 503) changes nothing.
   */
  async commit<R>(fn: (tx: Tx) => R | Promise<R>): Promise<R> {
    if (this.pg) return this.commitPg(fn);
    this.syncWithFiles();
    this.assertWritable();
    const tx = new Tx(this);
    const result = await fn(tx);
    const d = tx.devices.changes.size ? tx.devices.resolve() : new Map<string, DeviceRecord | undefined>();
    const w = tx.workers.changes.size ? tx.workers.resolve() : new Map<string, WorkerRecord | undefined>();
    if (!d.size && !w.size) {
      // Nothing to make durable with them: the entries are recorded as they are.
      if (tx.audits.length) await Promise.all(tx.audits.map((a) => this.requireAudit().record(a.op, a.fields)));
      return result;
    }
    const audited = tx.audits.length ? this.requireAudit().reserve(tx.audits) : [];
    try {
      await this.append(d, w, 'commit', audited);
    } catch (e) {
      if (audited.length) this.requireAudit().cancel(audited);
      throw e;
    }
    const written = audited.length ? this.requireAudit().fill(audited) : null;
    if (audited.length) this.walAuditMax = audited[audited.length - 1].id;
    this.noteChanges(d, w);
    if (d.size) this.devices.apply(d);
    if (w.size) this.workers.apply(w);
    // A committed record carries the telemetry merged into it.
    for (const k of d.keys()) this.devices.dirtyKeys.delete(k);
    await written;
    await this.afterCommit();
    return result;
  }

  private requireAudit(): AuditService {
    if (!this.audit) throw new Error('a commit carries audit entries but no audit trail is wired');
    return this.audit;
  }

  /**
   * Registers a device (from /devices/report) durably: concurrent registrations are committed
   * together, one change-log record and one fsync for the whole group. Resolves false when the
   * MAC is already known.
   */
  register(rec: DeviceRecord, opts: { admit?: { take: () => boolean; release: () => void }; audit?: TxAudit; poolLimit?: number } = {}): Promise<boolean> {
    const { admit, audit, poolLimit } = opts;
    return new Promise((resolve, reject) => {
      this.regQueue.push({ mac: rec.mac, apply: (cur) => (cur || (admit && !admit.take()) ? null : rec), undo: admit?.release, audit, poolLimit, resolve, reject });
      this.scheduleRegistrations();
    });
  }

  /**
   * A change to one device driven by /devices/report (a registration, a key claim), group-committed
   * with the others of a storm: `apply` runs under the lock inside the batch's transaction.
   */
  reportChange(mac: string, apply: Registration['apply'], undo?: () => void, audit?: TxAudit): Promise<boolean> {
    return new Promise((resolve, reject) => {
      this.regQueue.push({ mac, apply, undo, audit, resolve, reject });
      this.scheduleRegistrations();
    });
  }

  private scheduleRegistrations(): void {
    if (this.regScheduled) return;
    this.regScheduled = true;
    setImmediate(() => this.runRegistrations());
  }

  private runRegistrations(): void {
    this.regScheduled = false;
    const batch = this.regQueue.splice(0);
    if (!batch.length) return;
    let applied: boolean[] = [];
    this.lock
      .run(() =>
        this.commit((tx) => {
          let pooled = -1; // committed pooled devices plus the ones this batch adds
          applied = batch.map((b) => {
            const cur = tx.devices.get(b.mac);
            if (b.poolLimit !== undefined && !cur) {
              if (pooled < 0) pooled = this.pooledCount();
              if (pooled >= b.poolLimit) return false;
            }
            const next = b.apply(cur);
            if (!next) return false;
            if (!cur && next.state === 'pooled' && pooled >= 0) pooled++;
            tx.devices.set(b.mac, next);
            if (b.audit) tx.audit(b.audit.op, b.audit.fields);
            return true;
          });
          return applied;
        }),
      )
      .then(
        (changed) => batch.forEach((b, i) => b.resolve(changed[i])),
        (err) => {
          batch.forEach((b, i) => applied[i] && b.undo?.());
          batch.forEach((b) => b.reject(err));
        },
      );
  }

  /** Logs report telemetry soon, coalescing a storm into a few change-log records. */
  scheduleFlush(): void {
    if (this.flushTimer || this.closing) return;
    this.flushTimer = setTimeout(() => {
      this.flushTimer = null;
      this.lock
        .run(() => this.flushLocked())
        .catch((err) => {
          this.log.error({ err }, 'flush of device telemetry failed; retrying');
          this.scheduleFlush();
        });
    }, this.config.reportFlushMs);
    this.flushTimer.unref?.();
  }

  /** Number of devices in the pool (state pooled). */
  pooledCount(): number {
    if (this.pooledN === null) {
      let n = 0;
      for (const d of this.devices.values()) if (d.state === 'pooled') n++;
      this.pooledN = n;
    }
    return this.pooledN;
  }

  /**
   * The keys changed since the last call (or full = everything may have changed): the feed the
   * dnsmasq projection derives itself from incrementally. One consumer.
   */
  takeChanges(): { full: boolean; d: Set<string>; w: Set<string> } {
    const f = this.feed;
    this.feed = { full: false, d: new Set(), w: new Set() };
    return f;
  }

  /** Updates the indexes and the feed with a commit's changes, before they are applied. */
  private noteChanges(d: Map<string, DeviceRecord | undefined>, w: Map<string, WorkerRecord | undefined>): void {
    const macs: string[] = [];
    const workers: string[] = [];
    const names: string[] = [];
    for (const [k, next] of d) {
      const prev = this.devices.get(k);
      if (this.bindIdx) {
        if (prev?.bound_worker_id && this.bindIdx.get(prev.bound_worker_id) === k) this.bindIdx.delete(prev.bound_worker_id);
        if (next?.bound_worker_id) this.bindIdx.set(next.bound_worker_id, k);
      }
      if (this.pooledN !== null) this.pooledN += (next?.state === 'pooled' ? 1 : 0) - (prev?.state === 'pooled' ? 1 : 0);
      if (!this.feed.full) this.feed.d.add(k);
      if (bootFieldsOf(prev) !== bootFieldsOf(next)) macs.push(k);
    }
    for (const [k, next] of w) {
      const prev = this.workers.get(k);
      if (this.hostIdx) {
        if (prev && this.hostIdx.get(prev.hostname) === k) this.hostIdx.delete(prev.hostname);
        if (next) this.hostIdx.set(next.hostname, k);
      }
      if (!this.feed.full) this.feed.w.add(k);
      if (prev === next || (prev && next && JSON.stringify(prev) === JSON.stringify(next))) continue;
      workers.push(k);
      // A worker answers to its id and its hostname: both name lookups may change.
      names.push(k);
      if (prev) names.push(prev.hostname);
      if (next) names.push(next.hostname);
    }
    if (macs.length || workers.length) for (const fn of this.bootListeners) fn({ full: false, macs, workers, hostnames: names });
  }

  private readonly bootListeners: ((c: BootChange) => void)[] = [];

  /**
   * What boot answers depend on changed: the devices whose state or binding changed, the workers
   * that changed (and the names they answer to), or everything (`full`: a load, a replay, a hand
   * edit). Report telemetry (last_seen, fingerprints), which no boot answer contains, is not a
   * change here, whichever control plane wrote it.
   */
  onBootChange(fn: (c: BootChange) => void): void {
    this.bootListeners.push(fn);
  }

  /** After a load, replay or hand edit: indexes rebuild on next use, the projection re-derives. */
  private invalidate(): void {
    this.bindIdx = null;
    this.hostIdx = null;
    this.pooledN = null;
    this.feed = { full: true, d: new Set(), w: new Set() };
    for (const fn of this.bootListeners) fn({ full: true, macs: [], workers: [], hostnames: [] });
  }

  /** Logs pending report telemetry now (what the flush timer does a moment after reports). */
  flushTelemetry(): Promise<void> {
    return this.lock.run(() => this.flushLocked());
  }

  /** Writes both YAML files from memory and empties the change log. Under the lock. */
  async checkpoint(): Promise<void> {
    if (this.pg) return;
    await this.lock.run(() => this.checkpointLocked());
  }

  private async flushLocked(): Promise<void> {
    if (!this.devices.dirtyKeys.size) return;
    if (this.pg) return this.flushPg();
    this.syncWithFiles();
    if (this.devices.corrupt || this.workers.corrupt) {
      // Nothing is written while a hand edit is broken; telemetry waits in memory.
      this.scheduleFlush();
      return;
    }
    const keys = [...this.devices.dirtyKeys];
    const d = new Map<string, DeviceRecord | undefined>();
    for (const k of keys) d.set(k, this.devices.get(k));
    await this.append(d, new Map(), 'telemetry');
    for (const k of keys) this.devices.dirtyKeys.delete(k);
    this.scheduleCheckpoint();
  }

  private async checkpointLocked(): Promise<void> {
    // A hand edit that lands while a file is being written: merged, then written again.
    for (let attempt = 1; ; attempt++) {
      try {
        return await this.checkpointOnce();
      } catch (e) {
        if (!(e instanceof FileChangedError) || attempt >= 3) throw e;
        this.log.warn(`${e.file} was edited while the checkpoint was written; merging the edit and writing again`);
      }
    }
  }

  private async checkpointOnce(): Promise<void> {
    if (this.checkpointTimer) clearTimeout(this.checkpointTimer);
    this.checkpointTimer = null;
    this.syncWithFiles();
    if (this.devices.corrupt || this.workers.corrupt) return;
    if (!this.wal.count && !this.devices.stale && !this.workers.stale) return;
    const telemetry = [...this.devices.dirtyKeys];
    try {
      // devices.yml first, then workers.yml: a kill in between is repaired by replaying the log.
      if (this.devices.stale) await this.devices.checkpoint();
      if (this.workers.stale) await this.workers.checkpoint();
      // The log is the only durable copy of audit entries not yet in operations.jsonl.
      if (this.walAuditMax && this.audit && !(await this.audit.durableThrough(this.walAuditMax))) {
        throw new Error('audit entries carried by the change log are not yet in operations.jsonl');
      }
      await this.wal.reset();
      this.walAuditMax = 0;
    } catch (e) {
      if (e instanceof FileChangedError) throw e;
      this.scheduleCheckpoint(5000);
      throw storageFailure(e, this.config.stateDir);
    }
    // Telemetry touched during the write keeps the file stale and stays dirty for the next flush.
    if (!this.devices.stale) for (const k of telemetry) this.devices.dirtyKeys.delete(k);
    this.firstUncheckpointed = 0;
  }

  private async afterCommit(): Promise<void> {
    if (this.config.checkpointMs === 0) {
      await this.checkpointLocked().catch((err) => this.log.error({ err }, 'checkpoint failed; the change log keeps every commit'));
    } else if (this.wal.bytes >= this.config.checkpointBytes) this.scheduleCheckpoint(0);
    else this.scheduleCheckpoint();
  }

  /** A checkpoint a quiet moment after the last change, and at most 10 x that after the first. */
  private scheduleCheckpoint(delay = this.config.checkpointMs): void {
    if (this.closing) return;
    const now = performance.now();
    if (!this.firstUncheckpointed) this.firstUncheckpointed = now;
    const latest = this.firstUncheckpointed + this.config.checkpointMs * 10 - now;
    if (this.checkpointTimer) clearTimeout(this.checkpointTimer);
    this.checkpointTimer = setTimeout(
      () => {
        this.checkpointTimer = null;
        this.lock.run(() => this.checkpointLocked()).catch((err) => this.log.error({ err }, 'checkpoint failed; retrying'));
      },
      Math.max(0, Math.min(delay, latest)),
    );
    this.checkpointTimer.unref?.();
  }

  private walBaseChanged = false;
  /**
   * Keys that need no pre-change value in the next record: changed since the last checkpoint by a
   * logged commit (or, after a start on a log the checkpoint could not empty, by any of its records).
   */
  private walTouched = { d: new Set<string>(), w: new Set<string>() };

  /**
   * Before the change log is replayed over the YAML files: a file that matches none of the states
   * the log was written against was edited while the control plane was stopped. Where the edit
   * and the log's committed values disagree (telemetry aside), replaying would silently undo the
   * edit and keeping it would silently drop acknowledged commits: the start is refused, naming
   * the entries and both ways out. Agreeing or untouched entries replay as always (a kill between
   * a checkpoint's rename and the log's reset leaves files that agree with the log).
   */
  private checkReplay(records: ChangeRecord[]): void {
    for (const [map, field] of [
      [this.devices, 'd'],
      [this.workers, 'w'],
    ] as const) {
      const bases = new Set(records.flatMap((r) => (r.b ? [r.b[field]] : [])));
      if (!bases.size || bases.has(map.knownSha)) continue;
      const m = map as LedgerMap<DeviceRecord | WorkerRecord>;
      const value = (k: string, v: unknown) => (v === null || v === undefined ? undefined : m.check(k, v));
      const last = new Map<string, unknown>();
      const before = new Map<string, unknown>();
      for (const r of records) {
        for (const [k, v] of Object.entries(r.p?.[field] ?? {})) if (!before.has(k)) before.set(k, v);
        for (const [k, v] of Object.entries(r[field] ?? {})) last.set(k, v);
      }
      // An entry the edit left as the checkpoint had it, or already set to the committed value, is fine.
      const differ: string[] = [];
      for (const [k, v] of last) {
        if (!before.has(k)) continue; // a log of an older version: no pre-change value to compare
        const now = ledgerFacts(map.get(k));
        if (now !== ledgerFacts(value(k, before.get(k))) && now !== ledgerFacts(value(k, v))) differ.push(k);
      }
      if (!differ.length) continue;
      const text = this.fs.readTextSync(map.file) ?? '';
      const shown = differ.slice(0, 10).map((k) => JSON.stringify(k)).join(', ') + (differ.length > 10 ? ', ...' : '');
      throw new LedgerFileError(
        map.file,
        Math.max(1, lineOfKey(text, differ[0])),
        `edited while the control plane was stopped, and ${differ.length} entr(ies) of the edit differ from acknowledged commits in ${path.basename(this.wal.file)} that this file does not hold yet (${shown}). ` +
          `To keep the commits, undo the edit of those entries; to keep the edit, delete the records naming them from ${path.basename(this.wal.file)} (their audit entries stay)`,
      );
    }
  }

  private async append(
    d: Map<string, DeviceRecord | undefined>,
    w: Map<string, WorkerRecord | undefined>,
    kind: 'commit' | 'telemetry' = 'commit',
    audited: AuditEntry[] = [],
  ): Promise<void> {
    const rec: ChangeRecord = { seq: this.wal.seq + 1 };
    const marked = this.wal.count === 0 || this.walBaseChanged;
    if (marked) rec.b = { d: this.devices.knownSha, w: this.workers.knownSha };
    if (this.wal.count === 0) this.walTouched = { d: new Set(), w: new Set() };
    const firstTouch = (keys: Iterable<string>, seen: Set<string>, map: LedgerMap<DeviceRecord> | LedgerMap<WorkerRecord>) => {
      const out: Record<string, unknown> = {};
      for (const k of keys) if (!seen.has(k)) out[k] = map.get(k) ?? null;
      return out;
    };
    // Telemetry changes no fact a hand edit could disagree with: no pre-change values for it (a
    // storm's flush stays its own size), and a later commit of the key records them instead.
    const pd = kind === 'telemetry' ? {} : firstTouch(d.keys(), this.walTouched.d, this.devices);
    const pw = kind === 'telemetry' ? {} : firstTouch(w.keys(), this.walTouched.w, this.workers);
    if (Object.keys(pd).length || Object.keys(pw).length) rec.p = { ...(Object.keys(pd).length ? { d: pd } : {}), ...(Object.keys(pw).length ? { w: pw } : {}) };
    if (d.size) rec.d = obj(d);
    if (w.size) rec.w = obj(w);
    if (audited.length) rec.a = audited;
    const t0 = performance.now();
    try {
      await this.wal.append(rec);
    } catch (e) {
      throw storageFailure(e, this.wal.file);
    }
    if (marked) this.walBaseChanged = false;
    for (const k of Object.keys(pd)) this.walTouched.d.add(k);
    for (const k of Object.keys(pw)) this.walTouched.w.add(k);
    const seconds = (performance.now() - t0) / 1000;
    for (const o of this.commitObservers) o(seconds, kind);
  }

  private assertWritable(): void {
    for (const m of [this.devices, this.workers]) {
      if (m.corrupt) throw new ApiError(500, `ledger file is corrupt, fix it by hand first: ${m.corrupt.message}`);
    }
  }

  private replay(r: ChangeRecord, line: number): void {
    try {
      for (const [k, v] of Object.entries(r.d ?? {})) this.devices.replay(k, v === null ? undefined : this.devices.check(k, v));
      for (const [k, v] of Object.entries(r.w ?? {})) this.workers.replay(k, v === null ? undefined : this.workers.check(k, v));
    } catch (e) {
      throw new LedgerFileError(this.wal.file, line, (e as Error).message);
    }
  }

  /** Bindings that break the one-device-one-existing-worker invariant. */
  private violations(
    devices: { values(): IterableIterator<DeviceRecord> },
    workers: { has(k: string): boolean },
  ): { dangling: string[]; double: [string, string[]][] } {
    const dangling: string[] = [];
    const byWorker = new Map<string, string[]>();
    for (const d of devices.values()) {
      if (!d.bound_worker_id) continue;
      if (!workers.has(d.bound_worker_id)) dangling.push(d.mac);
      else byWorker.set(d.bound_worker_id, [...(byWorker.get(d.bound_worker_id) ?? []), d.mac]);
    }
    const double = [...byWorker].filter(([, macs]) => macs.length > 1);
    return { dangling, double };
  }

  /**
   * Picks up hand edits: a changed file is merged key by key into memory, checked against the
   * invariants (a worker bound twice blocks writes; a binding to a missing worker is undone),
   * then logged and checkpointed. Synchronous, so no request sees half of it.
   */
  private syncWithFiles(): void {
    const cd = this.devices.checkFile();
    const cw = this.workers.checkFile();
    if (cd.kind === 'same' && cw.kind === 'same') return;
    if (cd.kind === 'corrupt' || cw.kind === 'corrupt') return;
    const md = cd.kind === 'changed' ? this.devices.merge(cd.theirs) : null;
    const mw = cw.kind === 'changed' ? this.workers.merge(cw.theirs) : null;
    const devs = md?.merged ?? new Map(this.devices.entries());
    const wks = mw?.merged ?? new Map(this.workers.entries());
    const { dangling, double } = this.violations(devs, wks);
    if (double.length) {
      this.devices.markCorrupt(this.doubleBinding(double[0], cd.kind === 'changed' ? cd.text : (this.fs.readTextSync(this.devices.file) ?? '')));
      return;
    }
    this.unbindDangling(devs, dangling, 'hand edit left it bound to a worker that does not exist; returned to the pool');
    const dChanged = new Set([...(md?.changed ?? []), ...dangling]);
    for (const [file, m] of [[this.devices.file, md], [this.workers.file, mw]] as const) {
      if (m?.conflicts.length) {
        this.log.warn(`${file}: hand edit and control plane both changed ${m.conflicts.join(', ')} since the last checkpoint; the hand edit wins`);
      }
    }
    if (cd.kind === 'changed') this.devices.adopt(devs, cd.theirs, cd.stamp, [...dChanged], cd.text);
    else if (dangling.length) for (const mac of dangling) this.devices.replay(mac, devs.get(mac));
    if (cw.kind === 'changed') this.workers.adopt(wks, cw.theirs, cw.stamp, mw!.changed, cw.text);
    // The next record says which files the log now goes with (see checkReplay).
    this.walBaseChanged = true;
    this.invalidate();
    this.log.log(`picked up a hand edit: ${dChanged.size} device(s), ${mw?.changed.length ?? 0} worker(s) changed`);
    // Log the merged values, so a replay after a crash gives what memory holds now.
    const dKeys = [...dChanged];
    const wKeys = mw?.changed ?? [];
    if (dKeys.length || wKeys.length) {
      void this.lock
        .run(async () => {
          const d = new Map(dKeys.map((k) => [k, this.devices.get(k)] as const));
          const w = new Map(wKeys.map((k) => [k, this.workers.get(k)] as const));
          await this.append(d, w);
          await this.checkpointLocked();
        })
        .catch((err) => this.log.error({ err }, 'logging a hand edit failed; it stays in memory and in the file'));
    }
    this.auditRepairs();
    for (const fn of this.listeners) fn();
  }

  /** The error for a worker bound by two devices, naming their lines in devices.yml. */
  private doubleBinding([wid, macs]: [string, string[]], text: string): LedgerFileError {
    const lines = macs.map((m) => lineOfKey(text, m));
    return new LedgerFileError(
      this.devices.file,
      lines[1] ?? lines[0],
      `worker ${JSON.stringify(wid)} is bound by two devices: ${macs.map((m, i) => `${m} (line ${lines[i]})`).join(', ')}; unbind one by hand`,
    );
  }

  /** Returns devices bound to a missing worker to the pool (in devs) and records the repairs. */
  private unbindDangling(devs: Map<string, DeviceRecord>, macs: string[], reason: string): void {
    for (const mac of macs) {
      const d = devs.get(mac)!;
      devs.set(mac, { ...d, state: 'pooled', bound_worker_id: null });
      this.noteRepair({ mac, worker_id: d.bound_worker_id!, reason });
    }
  }

  private noteRepair(r: LedgerRepair): void {
    this.log.warn(`ledger repair: device ${r.mac} ${r.reason} (${r.worker_id})`);
    this.repairs.push(r);
  }

  private auditRepairs(): void {
    if (!this.bootstrapped) return;
    for (const r of this.repairs.splice(0)) {
      this.audit?.record('ledger.repair', { ...r, client: 'control-plane' }).catch(() => undefined);
    }
  }

  /** worker_id -> bound device MAC. */
  boundMacByWorker(): Map<string, string> {
    if (!this.bindIdx) {
      const map = new Map<string, string>();
      for (const d of this.devices.values()) if (d.bound_worker_id) map.set(d.bound_worker_id, d.mac);
      this.bindIdx = map;
    }
    return this.bindIdx;
  }

  /** hostname -> worker_id. */
  workerIdByHostname(): Map<string, string> {
    if (!this.hostIdx) {
      const map = new Map<string, string>();
      for (const w of this.workers.values()) map.set(w.hostname, w.worker_id);
      this.hostIdx = map;
    }
    return this.hostIdx;
  }
}

/**
 * The devices as a restart would see them (devices.yml + the change log), read without writing
 * anything: for tools and benches that check what is on disk while a control plane runs.
 */
/** A database failure as the API reports storage failures: unavailable (503), invariants (409). */
function pgFailure(e: unknown): unknown {
  if (e instanceof ApiError) return e;
  const code = (e as { code?: string }).code;
  if (code === '23505' || code === '23503' || code === '23514') return new ApiError(409, `the database refused the change: ${(e as Error).message}`);
  if (typeof code === 'string' && /^(08|57P|53)/.test(code)) return new ApiError(503, `the database is unavailable: ${(e as Error).message}`);
  if ((e as { errno?: number; syscall?: string }).syscall) return new ApiError(503, `the database is unreachable: ${(e as Error).message}`);
  return e;
}

export function readDevicesOnDisk(stateDir: string, fs: FileSystem): Map<string, DeviceRecord> {
  return readOnDisk(stateDir, fs, 'devices', validateDevice, (r) => r.d);
}

/** The workers as a restart would see them (workers.yml + the change log), read without writing anything. */
export function readWorkersOnDisk(stateDir: string, fs: FileSystem): Map<string, WorkerRecord> {
  return readOnDisk(stateDir, fs, 'workers', validateWorker, (r) => r.w);
}

function readOnDisk<T extends object>(stateDir: string, fs: FileSystem, root: 'devices' | 'workers', validate: Validator<T>, part: (r: ChangeRecord) => Record<string, unknown> | undefined): Map<string, T> {
  const m = new LedgerMap<T>(path.join(stateDir, `${root}.yml`), root, '', validate, fs);
  m.loadSync();
  for (const r of new ChangeLog(path.join(stateDir, 'ledger.wal'), fs).loadSync(true)) {
    for (const [k, v] of Object.entries(part(r) ?? {})) m.replay(k, v === null ? undefined : m.check(k, v));
  }
  return new Map(m.entries());
}
