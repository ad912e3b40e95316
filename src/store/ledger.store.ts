import { Injectable, Logger, OnApplicationShutdown, OnModuleInit } from '@nestjs/common';
import * as path from 'node:path';
import { ApiError } from '../common/api-error';
import { AppConfig } from '../config/app-config';
import { FileSystem } from './file-system';
import { LedgerMap } from './ledger-map';
import { Mutex } from './mutex';
import { DeviceRecord, validateDevice, validateWorker, WorkerRecord } from './records';

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
  constructor(store: LedgerStore) {
    this.devices = new TxMap(store.devices);
    this.workers = new TxMap(store.workers);
  }
}

const DEVICES_HEADER = [
  '# Kurrent device ledger: the authority for device <-> worker bindings (bound_worker_id).',
  '# One device per line in JSON flow style (valid YAML). Hand edits are picked up on the next',
  '# request; any YAML layout is accepted, this one loads fastest.',
].join('\n');
const WORKERS_HEADER = [
  '# Kurrent worker ledger: identity, system disks, install CD and default boot of each worker.',
  '# One worker per line in JSON flow style (valid YAML). Hand edits are picked up on the next',
  '# request; any YAML layout is accepted, this one loads fastest.',
].join('\n');

/**
 * The file ledger: devices.yml and workers.yml in memory, one write lock, atomic commits that
 * write every touched file before anything becomes visible, and rollback by rewriting the files
 * already written when a later write fails.
 */
@Injectable()
export class LedgerStore implements OnModuleInit, OnApplicationShutdown {
  private readonly log = new Logger('LedgerStore');
  readonly lock = new Mutex();
  readonly devices: LedgerMap<DeviceRecord>;
  readonly workers: LedgerMap<WorkerRecord>;
  private lastRefresh = 0;
  private flushTimer: NodeJS.Timeout | null = null;
  private boundIndex: { dv: number; map: Map<string, string> } = { dv: -1, map: new Map() };
  private hostIndex: { wv: number; map: Map<string, string> } = { wv: -1, map: new Map() };

  constructor(
    private readonly config: AppConfig,
    private readonly fs: FileSystem,
  ) {
    this.devices = new LedgerMap(
      path.join(config.stateDir, 'devices.yml'),
      'devices',
      DEVICES_HEADER,
      validateDevice,
      fs,
    );
    this.workers = new LedgerMap(
      path.join(config.stateDir, 'workers.yml'),
      'workers',
      WORKERS_HEADER,
      validateWorker,
      fs,
    );
  }

  onModuleInit(): void {
    this.fs.mkdirpSync(this.config.stateDir);
    this.devices.loadSync();
    this.workers.loadSync();
  }

  async onApplicationShutdown(): Promise<void> {
    if (this.flushTimer) clearTimeout(this.flushTimer);
    this.flushTimer = null;
    await this.lock.run(() => this.flush());
  }

  /** Reads: picks up hand edits at most every 200 ms, never in the middle of a transaction. */
  read(): this {
    const now = performance.now();
    if (now - this.lastRefresh > 200 && !this.lock.busy) {
      this.lastRefresh = now;
      this.devices.refreshIfChanged();
      this.workers.refreshIfChanged();
    }
    return this;
  }

  /** Runs fn under the write lock. */
  exclusive<R>(fn: () => Promise<R> | R): Promise<R> {
    return this.lock.run(fn);
  }

  /**
   * Runs fn against a transaction and commits it. Must be called under the lock (exclusive).
   * fn may throw (an ApiError usually): nothing is written then.
   */
  async commit<R>(fn: (tx: Tx) => R | Promise<R>): Promise<R> {
    this.devices.refreshIfChanged();
    this.workers.refreshIfChanged();
    for (const m of [this.devices, this.workers]) {
      if (m.corrupt) {
        throw new ApiError(500, `ledger file is corrupt, fix it by hand first: ${m.corrupt.message}`);
      }
    }
    const tx = new Tx(this);
    const result = await fn(tx);
    const plan: { map: LedgerMap<object>; changes: Map<string, object | undefined> }[] = [];
    if (tx.devices.changes.size) plan.push({ map: this.devices as LedgerMap<object>, changes: tx.devices.resolve() });
    if (tx.workers.changes.size) plan.push({ map: this.workers as LedgerMap<object>, changes: tx.workers.resolve() });
    const written: LedgerMap<object>[] = [];
    try {
      for (const p of plan) {
        // The full render includes pending telemetry, so it counts as a flush too.
        const wasDirty = p.map.dirty;
        p.map.dirty = false;
        try {
          await p.map.write(p.map.render(p.changes));
        } catch (e) {
          p.map.dirty = p.map.dirty || wasDirty;
          throw e;
        }
        written.push(p.map);
      }
    } catch (e) {
      // Rollback = rewrite: the in-memory base still holds the pre-transaction state.
      for (const m of written) {
        await m.write(m.render()).catch((err) => this.log.error({ err }, `rollback of ${m.file} failed`));
      }
      throw e;
    }
    for (const p of plan) p.map.apply(p.changes);
    return result;
  }

  /** Persists telemetry (report) updates soon, coalescing a storm into a few writes. */
  scheduleFlush(): void {
    if (this.flushTimer) return;
    this.flushTimer = setTimeout(() => {
      this.flushTimer = null;
      this.lock
        .run(() => this.flush())
        .catch((err) => {
          this.log.error({ err }, 'flush of device telemetry failed; retrying');
          this.scheduleFlush();
        });
    }, this.config.reportFlushMs);
    this.flushTimer.unref?.();
  }

  private async flush(): Promise<void> {
    for (const m of [this.devices, this.workers] as LedgerMap<object>[]) {
      if (!m.dirty) continue;
      m.dirty = false;
      try {
        await m.write(m.render());
      } catch (e) {
        m.dirty = true;
        throw e;
      }
    }
  }

  /** worker_id -> bound device MAC, rebuilt only when the devices ledger changes structurally. */
  boundMacByWorker(): Map<string, string> {
    if (this.boundIndex.dv !== this.devices.version) {
      const map = new Map<string, string>();
      for (const d of this.devices.values()) if (d.bound_worker_id) map.set(d.bound_worker_id, d.mac);
      this.boundIndex = { dv: this.devices.version, map };
    }
    return this.boundIndex.map;
  }

  /** hostname -> worker_id. */
  workerIdByHostname(): Map<string, string> {
    if (this.hostIndex.wv !== this.workers.version) {
      const map = new Map<string, string>();
      for (const w of this.workers.values()) map.set(w.hostname, w.worker_id);
      this.hostIndex = { wv: this.workers.version, map };
    }
    return this.hostIndex.map;
  }
}
