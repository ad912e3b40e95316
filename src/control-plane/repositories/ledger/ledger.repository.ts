import { Logger } from '@nestjs/common';
import * as path from 'node:path';
import { FileSystem } from '../../../shared/files/file-system';
import { LedgerMap } from '../../../shared/files/ledger-map';
import { Mutex } from '../../../shared/files/mutex';
import { AppConfig } from '../../config/app-config';
import type { TxAudit } from '../audit/audit.repository';
import { Tx } from './ledger-tx';
import { DEVICE_SEAL, DeviceRecord, validateDevice, validateWorker, WORKER_SEAL, WorkerRecord } from './records';

export { Tx, TxMap } from './ledger-tx';

const DEVICES_HEADER = [
  '# Kurrent device ledger: the authority for device <-> worker bindings (bound_worker_id).',
  '# One device per line in JSON flow style (valid YAML). Hand edits are picked up within a',
  '# second and merged key by key; any YAML layout is accepted, this one loads fastest.',
  '# The seal below covers what Kurrent wrote: an edited file is checked entry by entry at start.',
].join('\n');
const WORKERS_HEADER = [
  '# Kurrent worker ledger: identity, system disks, install CD and default boot of each worker.',
  '# One worker per line in JSON flow style (valid YAML). Hand edits are picked up within a',
  '# second and merged key by key; any YAML layout is accepted, this one loads fastest.',
  '# The seal below covers what Kurrent wrote: an edited file is checked entry by entry at start.',
].join('\n');

/** A repair the store made to keep an invariant (start-up or hand edit); audited as ledger.repair. */
export interface LedgerRepair {
  mac: string;
  worker_id: string;
  reason: string;
}

export interface Registration {
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

/** See LedgerRepository.onBootChange. */
export interface BootChange {
  full: boolean;
  /** This process's own commit (false: another control plane's, caught up). */
  local: boolean;
  macs: string[];
  workers: string[];
  hostnames: string[];
}

/** The part of a device record a boot answer depends on. */
const bootFieldsOf = (d: DeviceRecord | undefined): string => (d ? `${d.state}\0${d.bound_worker_id ?? ''}` : '');

export type ChangeSet = { d: Map<string, DeviceRecord | undefined>; w: Map<string, WorkerRecord | undefined> };

/**
 * The ledger of devices and workers: what every service reads and commits through, whichever
 * engine keeps it. This class is the part both engines share: the in-memory records (every read,
 * the boot path included, is served from them), the indexes kept commit by commit, the change feed
 * of the dnsmasq projection, the boot-change listeners, the write lock, and the group commit of
 * report-driven registrations. An engine (FileLedgerRepository, PgLedgerRepository) makes a
 * transaction durable (`commit`), writes report telemetry (`flushLocked`) and loads the records;
 * it feeds every durable change through `applyCommitted`, so the indexes and the feed follow.
 */
export abstract class LedgerRepository {
  protected readonly log = new Logger('Ledger');
  readonly lock = new Mutex();
  readonly devices: LedgerMap<DeviceRecord>;
  readonly workers: LedgerMap<WorkerRecord>;
  protected closing = false;
  protected flushTimer: NodeJS.Timeout | null = null;
  private regQueue: Registration[] = [];
  private regScheduled = false;
  protected readonly listeners: (() => void)[] = [];
  protected readonly commitObservers: ((seconds: number, kind: 'commit' | 'telemetry') => void)[] = [];
  private readonly bootListeners: ((c: BootChange) => void)[] = [];
  /**
   * Indexes kept up to date commit by commit (null = rebuild on next use, after a load, a replay
   * or a hand edit), so no mutation pays for a scan of the whole ledger.
   */
  private bindIdx: Map<string, string> | null = null;
  private hostIdx: Map<string, string> | null = null;
  private pooledN: number | null = null;
  /** Keys changed since the projection (dhcp-hosts.conf) last took them; full = re-derive all. */
  private feed = { full: true, d: new Set<string>(), w: new Set<string>() };
  /** Work queued by afterRelease while the current holder runs (one holder at a time). */
  private releaseWork: (() => Promise<void>)[] | null = null;

  constructor(
    protected readonly config: AppConfig,
    fs: FileSystem,
  ) {
    // Reports move last_seen in place (DevicesService.report): a hand-edit merge compares the rest.
    this.devices = new LedgerMap(path.join(config.stateDir, 'devices.yml'), 'devices', DEVICES_HEADER, validateDevice, fs, (d) => JSON.stringify({ ...d, last_seen: null }), DEVICE_SEAL);
    this.workers = new LedgerMap(path.join(config.stateDir, 'workers.yml'), 'workers', WORKERS_HEADER, validateWorker, fs, undefined, WORKER_SEAL);
  }

  // ---- what an engine provides

  /**
   * Runs fn against a transaction and commits it. Must be called under the lock (exclusive).
   * fn may throw (an ApiError usually): nothing is written then. Resolves once the commit is
   * durable; a storage failure changes nothing.
   */
  abstract commit<R>(fn: (tx: Tx) => R | Promise<R>): Promise<R>;

  /** Reads: the records as this process has them (the file engine picks up hand edits here). */
  abstract read(): this;

  /** Makes the engine's own files current (the file engine's checkpoint); nothing on PostgreSQL. */
  abstract checkpoint(): Promise<void>;

  /** Writes pending report telemetry. Under the lock. */
  protected abstract flushLocked(): Promise<void>;

  // ---- shared

  /** Picks up outside changes (hand edits, at most every 200 ms) so that onBootChange listeners hear of them. */
  refreshForBoot(): void {
    this.read();
  }

  /** Called with the duration of every durable write (commits and telemetry). */
  onCommitted(fn: (seconds: number, kind: 'commit' | 'telemetry') => void): void {
    this.commitObservers.push(fn);
  }

  protected observeCommit(seconds: number, kind: 'commit' | 'telemetry'): void {
    for (const o of this.commitObservers) o(seconds, kind);
  }

  /** Called after a change this process did not commit (a hand edit, another control plane's commit). */
  onExternalChange(fn: () => void): void {
    this.listeners.push(fn);
  }

  protected externalChange(): void {
    for (const fn of this.listeners) fn();
  }

  /**
   * What boot answers depend on changed: the devices whose state or binding changed, the workers
   * that changed (and the names they answer to), or everything (`full`: a load, a replay, a hand
   * edit). Report telemetry (last_seen, fingerprints), which no boot answer contains, is not a
   * change here, whichever control plane wrote it.
   */
  onBootChange(fn: (c: BootChange) => void): void {
    this.bootListeners.push(fn);
  }

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
   * Registers a device (from /devices/report) durably: concurrent registrations are committed
   * together, one durable write for the whole group. Resolves false when the MAC is already known.
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

  /** Writes report telemetry soon, coalescing a storm into a few writes. */
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

  /** Writes pending report telemetry now (what the flush timer does a moment after reports). */
  flushTelemetry(): Promise<void> {
    return this.lock.run(() => this.flushLocked());
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

  /**
   * The keys changed since the last call (or full = everything may have changed): the feed the
   * dnsmasq projection derives itself from incrementally. One consumer.
   */
  takeChanges(): { full: boolean; d: Set<string>; w: Set<string> } {
    const f = this.feed;
    this.feed = { full: false, d: new Set(), w: new Set() };
    return f;
  }

  /** A durable change (this process's commit, or another's caught up): indexes, feed, then the records. */
  protected applyCommitted({ d, w }: ChangeSet, local = true): void {
    this.noteChanges(d, w, local);
    if (d.size) this.devices.apply(d);
    if (w.size) this.workers.apply(w);
  }

  /** Resolves a transaction's changes against the current records (see TxMap.resolve). */
  protected changesOf(tx: Tx): ChangeSet {
    return {
      d: tx.devices.changes.size ? tx.devices.resolve() : new Map<string, DeviceRecord | undefined>(),
      w: tx.workers.changes.size ? tx.workers.resolve() : new Map<string, WorkerRecord | undefined>(),
    };
  }

  /** Updates the indexes and the feed with a commit's changes, before they are applied. */
  private noteChanges(d: Map<string, DeviceRecord | undefined>, w: Map<string, WorkerRecord | undefined>, local: boolean): void {
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
    if (macs.length || workers.length) for (const fn of this.bootListeners) fn({ full: false, local, macs, workers, hostnames: names });
  }

  /** After a load, replay or hand edit: indexes rebuild on next use, the projection re-derives. */
  protected invalidate(): void {
    this.bindIdx = null;
    this.hostIdx = null;
    this.pooledN = null;
    this.feed = { full: true, d: new Set(), w: new Set() };
    for (const fn of this.bootListeners) fn({ full: true, local: false, macs: [], workers: [], hostnames: [] });
  }
}
