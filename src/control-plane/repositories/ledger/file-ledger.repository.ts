import { Injectable, OnApplicationBootstrap, OnApplicationShutdown, OnModuleInit, Optional } from '@nestjs/common';
import * as path from 'node:path';
import { FileChangedError, FileSystem } from '../../../shared/files/file-system';
import { LedgerFileError, LedgerMap, lineOfKey } from '../../../shared/files/ledger-map';
import { isStorageFailure, StateInUseError, storageFailure } from '../../../shared/files/storage-error';
import { ApiError } from '../../../shared/http/api-error';
import { AppConfig } from '../../config/app-config';
import type { AuditEntry } from '../audit/audit.repository';
import { FileAuditRepository } from '../audit/file-audit.repository';
import { ChangeLog, ChangeRecord } from './change-log';
import { LedgerRepair, LedgerRepository, Tx } from './ledger.repository';
import { DeviceRecord, WorkerRecord } from './records';

const obj = <T>(m: Map<string, T | undefined>): Record<string, T | null> => {
  const o: Record<string, T | null> = {};
  for (const [k, v] of m) o[k] = v ?? null;
  return o;
};

/** Devices a telemetry record of the change log holds at most (~450 bytes each: a line well under 128 KB). */
export const TELEMETRY_PER_RECORD = 200;

/** Entries cut into maps of at most n entries, in order (a map that fits: itself; nothing: one empty map). */
function chunksOf<T>(m: Map<string, T> | Iterable<[string, T]>, n: number): Map<string, T>[] {
  if (m instanceof Map && m.size <= n) return [m];
  const out: Map<string, T>[] = [new Map()];
  for (const [k, v] of m) {
    if (out[out.length - 1].size >= n) out.push(new Map());
    out[out.length - 1].set(k, v);
  }
  return out;
}

/** Each key with its record in `map` as it is now. */
function* recordsOf<T extends object>(keys: Iterable<string>, map: LedgerMap<T>): Generator<[string, T | undefined]> {
  for (const k of keys) yield [k, map.get(k)];
}

/** Report telemetry of a device record: written by reports, never what a hand edit and a commit disagree on. */
const TELEMETRY_FIELDS = new Set(['uuid', 'fingerprint', 'first_seen', 'last_seen']);
/** A ledger record without its telemetry (top-level fields only; worker records have none). */
const ledgerFacts = (r: DeviceRecord | WorkerRecord | undefined): string =>
  r ? JSON.stringify(Object.fromEntries(Object.entries(r).filter(([k]) => !TELEMETRY_FIELDS.has(k)))) : '';

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
export class FileLedgerRepository extends LedgerRepository implements OnModuleInit, OnApplicationBootstrap, OnApplicationShutdown {
  readonly wal: ChangeLog;
  private readonly lockFile: string;
  private lastRefresh = 0;
  private checkpointTimer: NodeJS.Timeout | null = null;
  private firstUncheckpointed = 0;
  /** The highest audit id a change-log record carries since the last checkpoint. */
  private walAuditMax = 0;
  private repairs: LedgerRepair[] = [];
  private bootstrapped = false;

  constructor(
    config: AppConfig,
    private readonly fs: FileSystem,
    @Optional() private readonly audit?: FileAuditRepository,
  ) {
    super(config, fs);
    this.wal = new ChangeLog(path.join(config.stateDir, 'ledger.wal'), fs);
    this.lockFile = path.join(config.stateDir, 'kurrent.lock');
  }

  async onModuleInit(): Promise<void> {
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
    if (this.audit) {
      // With those the credential log carries (one call, so the file stays in id order). On a full
      // disk they stay in the logs (a checkpoint keeps its log until they are written).
      await this.audit.recover(carried).catch((e: unknown) => {
        if (!isStorageFailure(e)) throw e;
        this.log.warn(`audit entries of committed changes wait in the change logs: ${(e as Error).message}`);
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

  async onApplicationShutdown(): Promise<void> {
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

  /**
   * Reads: pick up hand edits, never in the middle of a transaction. After 200 ms without a read
   * the first read checks the files synchronously (off the hot path, so an edit is seen by the next
   * request as before). Under load (reads closer together than that) they are stat'ed off the
   * event loop every 200 ms instead, and a change is merged by the read after the stat.
   */
  read(): this {
    const now = performance.now();
    const idle = now - this.lastRead > 200;
    this.lastRead = now;
    if (this.lock.busy) return this;
    if (this.handEditSeen || (idle && now - this.lastRefresh > 200)) {
      this.handEditSeen = false;
      this.lastRefresh = now;
      this.syncWithFiles();
    } else if (now - this.lastRefresh > 200) {
      this.lastRefresh = now;
      void this.statFiles();
    }
    return this;
  }

  private lastRead = 0;
  /** Set by statFiles when a file's stamp moved: the next read merges it. */
  private handEditSeen = false;
  private statting = false;

  private async statFiles(): Promise<void> {
    if (this.statting) return;
    this.statting = true;
    try {
      const [d, w] = await Promise.all([this.fs.stat(this.devices.file), this.fs.stat(this.workers.file)]);
      if (this.devices.differs(d) || this.workers.differs(w)) this.handEditSeen = true;
    } catch {
      this.handEditSeen = true; // let the synchronous check say what is wrong
    } finally {
      this.statting = false;
    }
  }

  /**
   * Runs fn against a transaction and commits it. Must be called under the lock (exclusive).
   * fn may throw (an ApiError usually): nothing is written then. Resolves once the commit is
   * durable; a storage failure (full disk: 507, read-only: 503) changes nothing.
   */
  async commit<R>(fn: (tx: Tx) => R | Promise<R>): Promise<R> {
    this.syncWithFiles();
    this.assertWritable();
    const tx = new Tx(this);
    const result = await fn(tx);
    const { d, w } = this.changesOf(tx);
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
    this.applyCommitted({ d, w });
    // A committed record carries the telemetry merged into it.
    for (const k of d.keys()) this.devices.dirtyKeys.delete(k);
    await written;
    await this.afterCommit();
    return result;
  }

  private requireAudit(): FileAuditRepository {
    if (!this.audit) throw new Error('a commit carries audit entries but no audit trail is wired');
    return this.audit;
  }

  /** Writes both YAML files from memory and empties the change log. Under the lock. */
  async checkpoint(): Promise<void> {
    await this.lock.run(() => this.checkpointLocked());
  }

  protected async flushLocked(): Promise<void> {
    if (!this.devices.dirtyKeys.size) return;
    this.syncWithFiles();
    if (this.devices.corrupt || this.workers.corrupt) {
      // Nothing is written while a hand edit is broken; telemetry waits in memory.
      this.scheduleFlush();
      return;
    }
    const keys = this.devices.takeDirty();
    try {
      // Cut into records as the keys are read: no map of the whole batch (see takeDirty).
      await this.append(chunksOf(recordsOf(keys, this.devices), TELEMETRY_PER_RECORD), new Map(), 'telemetry');
    } catch (e) {
      this.devices.restoreDirty(keys);
      throw e;
    }
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

  /** `d`: the device changes, or (telemetry) those already cut into records (chunksOf). */
  private async append(
    d: Map<string, DeviceRecord | undefined> | Map<string, DeviceRecord | undefined>[],
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
    const parts = Array.isArray(d) ? d : kind === 'telemetry' ? chunksOf(d, TELEMETRY_PER_RECORD) : [d];
    const pd = kind === 'telemetry' ? {} : firstTouch(parts[0].keys(), this.walTouched.d, this.devices);
    const pw = kind === 'telemetry' ? {} : firstTouch(w.keys(), this.walTouched.w, this.workers);
    if (Object.keys(pd).length || Object.keys(pw).length) rec.p = { ...(Object.keys(pd).length ? { d: pd } : {}), ...(Object.keys(pw).length ? { w: pw } : {}) };
    // A storm's telemetry (thousands of devices a flush) goes as records of TELEMETRY_PER_RECORD
    // devices: one record of all was a string of megabytes, twice (the JSON and its line), a
    // Buffer as big and a dictionary, each too large for the young generation, so garbage that
    // only a full GC gave back, twice a second (bench:scale, RSS after the storm).
    if (parts[0].size) rec.d = obj(parts[0]);
    if (w.size) rec.w = obj(w);
    if (audited.length) rec.a = audited;
    const recs = [rec, ...parts.slice(1).map((p, i): ChangeRecord => ({ seq: rec.seq + 1 + i, d: obj(p) }))];
    const t0 = performance.now();
    try {
      await this.wal.appendMany(recs);
    } catch (e) {
      throw storageFailure(e, this.wal.file);
    }
    if (marked) this.walBaseChanged = false;
    for (const k of Object.keys(pd)) this.walTouched.d.add(k);
    for (const k of Object.keys(pw)) this.walTouched.w.add(k);
    this.observeCommit((performance.now() - t0) / 1000, kind);
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
    // A worker's first device alone; a list only for a worker bound twice (no array per seat at start).
    const first = new Map<string, string>();
    const more = new Map<string, string[]>();
    for (const d of devices.values()) {
      const id = d.bound_worker_id;
      if (!id) continue;
      if (!workers.has(id)) {
        dangling.push(d.mac);
        continue;
      }
      const mac = first.get(id);
      if (mac === undefined) {
        first.set(id, d.mac);
        continue;
      }
      const list = more.get(id);
      if (list) list.push(d.mac);
      else more.set(id, [mac, d.mac]);
    }
    // In the order the workers first appear, as before.
    const double = more.size ? [...first.keys()].filter((id) => more.has(id)).map((id): [string, string[]] => [id, more.get(id)!]) : [];
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
    this.externalChange();
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
}
