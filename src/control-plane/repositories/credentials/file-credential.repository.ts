import { Injectable, Logger, OnApplicationShutdown, OnModuleInit, Optional } from '@nestjs/common';
import * as path from 'node:path';
import { FileChangedError, FileSystem, sameStamp, type FileStamp } from '../../../shared/files/file-system';
import { LedgerFileError } from '../../../shared/files/ledger-map';
import { LineSplitter } from '../../../shared/files/line-splitter';
import { storageFailure } from '../../../shared/files/storage-error';
import { ApiError } from '../../../shared/http/api-error';
import { dhchapKeyError } from '../../../shared/nvme-keys';
import { AppConfig } from '../../config/app-config';
import type { AuditEntry } from '../audit/audit.repository';
import { FileAuditRepository } from '../audit/file-audit.repository';
import { ChangeLog } from '../ledger/change-log';
import { Mutex } from '../../../shared/files/mutex';
import { applyDelta, CredentialAudit, CredentialRecord, CredentialRepository, FileShape, RemovalRecord, runOnView, withAudit } from './credential.repository';

/**
 * One change in nvme-credentials.wal: the new value of each credential it changed (null:
 * deleted), the removals if they changed, and the change's audit entries with their ids
 * (recovered at start if a kill kept them out of operations.jsonl).
 */
interface CredentialLogRecord {
  seq: number;
  c: Record<string, CredentialRecord | null>;
  r?: RemovalRecord[];
  a?: AuditEntry[];
}

/** WAL bytes past which it is folded into nvme-credentials.json at once (and at least a quarter of that file). */
const WAL_FOLD_BYTES = 4 * 1024 * 1024;

/**
 * state/nvme-credentials.json (mode 0600) and its redo log state/nvme-credentials.wal (0600): the
 * only place the control plane keeps NVMe secrets. A change appends the credentials it changed to
 * the log (fdatasync'ed before it is acknowledged), so its cost is what it touched, not the fleet;
 * the JSON file is rewritten from memory (temp, fsync, rename) once the log has been quiet for
 * IPXE_CP_CHECKPOINT_MS, once it grows past a quarter of the file, and at shutdown, and then the
 * log is emptied. A start reads the file and replays the log (records carry whole values).
 */
@Injectable()
export class FileCredentialRepository extends CredentialRepository implements OnModuleInit, OnApplicationShutdown {
  private readonly log = new Logger('Credentials');
  readonly file: string;
  private readonly wal: ChangeLog<CredentialLogRecord>;
  private readonly flushMs: number;
  private readonly checkpointMs: number;
  /** Size of the JSON file at its last write: the log is folded in once it reaches a quarter of it. */
  private fileBytes = 0;
  /** The highest audit id a log record carries since the last fold: the log is emptied only once it is in operations.jsonl. */
  private walAuditMax = 0;

  constructor(
    config: AppConfig,
    private readonly fs: FileSystem,
    @Optional() private readonly audit?: FileAuditRepository,
  ) {
    super();
    this.file = path.join(config.stateDir, 'nvme-credentials.json');
    this.wal = new ChangeLog<CredentialLogRecord>(path.join(config.stateDir, 'nvme-credentials.wal'), fs, 0o600);
    this.flushMs = Math.min(config.checkpointMs, 200);
    this.checkpointMs = config.checkpointMs;
    // The ledger's start recovers these with its own (under the state lock, in one id order). A
    // damaged log is this repository's start to report, not the ledger's.
    audit?.addCarrier(() => {
      try {
        return new ChangeLog<CredentialLogRecord>(this.wal.file, fs).loadSync(true).flatMap((r) => r.a ?? []);
      } catch {
        return [];
      }
    });
  }

  onModuleInit(): void {
    this.stamp = this.fs.statSync(this.file);
    this.fileBytes = this.stamp?.size ?? 0;
    this.data = readCredentialsFile(this.file, this.fs);
    const carried = this.replayLog().flatMap((r) => r.a ?? []);
    this.walAuditMax = Math.max(0, ...carried.map((e) => e.id));
    this.revision++;
  }

  /** Applies the log's records on top of this.data: at start (a torn tail is cut), and on a hand edit of the file (read only). */
  private replayLog(readOnly = false): CredentialLogRecord[] {
    const log = readOnly ? new ChangeLog<CredentialLogRecord>(this.wal.file, this.fs) : this.wal;
    const records = log.loadSync(readOnly);
    for (const rec of records) applyRecord(this.data, rec);
    return records;
  }

  /** nvme-credentials.json as last read or written by this process (a different stamp: a hand edit). */
  private stamp: FileStamp | null = null;
  /** Set while a fold beside the changes renames its file into place. */
  private replacing = false;

  /**
   * A hand edit of the file since this process last read or wrote it becomes the state (it is
   * never written over), with the log's changes on top (they were acknowledged); push bookkeeping
   * not yet flushed is then re-derived by the reconciler. A broken edit refuses the change, naming
   * the file, until it is fixed.
   */
  private pickUpHandEdit(): void {
    // A fold is renaming its file into place (its stamp is already this.stamp).
    if (this.replacing) return;
    const st = this.fs.statSync(this.file);
    if (sameStamp(st, this.stamp)) return;
    let next: FileShape;
    try {
      next = readCredentialsFile(this.file, this.fs);
    } catch (e) {
      if (e instanceof LedgerFileError) throw new ApiError(500, `${e.message}; fix the hand edit, nothing was changed`);
      throw e;
    }
    this.log.warn(`picked up a hand edit of ${this.file}`);
    this.data = next;
    this.replayLog(true);
    this.stamp = st;
    this.fileBytes = st?.size ?? 0;
    this.dirty.clear();
    this.removalsDirty = false;
    this.revision++;
  }

  /**
   * The change's audit entries get their ids before the record is written and travel in it (as a
   * ledger commit's do): they reach operations.jsonl once the record is durable, and a kill in
   * between is repaired at start from this log. Resolves once the entries are written too.
   */
  async change<R>(fn: (d: FileShape, audit: CredentialAudit) => R): Promise<R> {
    const { fn: run, audits } = withAudit(fn);
    const { r, written } = await this.lock.run(async () => {
      this.pickUpHandEdit();
      const { r, delta } = runOnView(this.data, run);
      // Nothing to make durable with them: the entries are recorded as they are.
      if (!delta) return { r, written: Promise.all(audits.map((a) => this.requireAudit().record(a.op, a.fields))) };
      const audited = audits.length ? this.requireAudit().reserve(audits) : [];
      try {
        await this.wal.append({
          seq: this.wal.seq + 1,
          c: Object.fromEntries(delta.credentials),
          ...(delta.removals ? { r: delta.removals } : {}),
          ...(audited.length ? { a: audited } : {}),
        });
      } catch (e) {
        if (audited.length) this.requireAudit().cancel(audited);
        throw storageFailure(e, 'nvme-credentials.wal');
      }
      const written = audited.length ? this.requireAudit().fill(audited) : Promise.resolve();
      if (audited.length) this.walAuditMax = audited[audited.length - 1].id;
      applyDelta(this.data, delta);
      // The record holds their latest values: nothing of them is left for the next flush.
      for (const id of delta.credentials.keys()) this.dirty.delete(id);
      if (delta.removals) this.removalsDirty = false;
      this.revision++;
      await this.afterAppend(written);
      return { r, written };
    });
    await written;
    return r;
  }

  private requireAudit(): FileAuditRepository {
    if (!this.audit) throw new Error('a credential change carries audit entries but no audit trail is wired');
    return this.audit;
  }

  /**
   * Push bookkeeping (states, attempts, retry times): applied at once, appended to the log by one
   * coalesced, unsynced write shortly after. A crash may lose the last of it; the reconciler
   * re-derives it from what the agents list (a lost "pushed" is found as drift, a lost "failed" is
   * retried), so a fleet-wide push costs one small append per flush, not a file per host.
   */
  note<R>(fn: (d: FileShape) => R): Promise<R> {
    return this.lock.run(() => {
      this.pickUpHandEdit();
      const { r, delta } = runOnView(this.data, fn);
      if (!delta) return r;
      applyDelta(this.data, delta);
      for (const id of delta.credentials.keys()) this.dirty.add(id);
      if (delta.removals) this.removalsDirty = true;
      this.revision++;
      this.scheduleFlush();
      return r;
    });
  }

  /** Writes what note() changed (also at shutdown). */
  flush(): Promise<void> {
    return this.lock.run(async () => {
      if (!this.dirty.size && !this.removalsDirty) return;
      const rec: CredentialLogRecord = {
        seq: this.wal.seq + 1,
        c: Object.fromEntries([...this.dirty].map((id) => [id, this.data.credentials[id] ?? null])),
        ...(this.removalsDirty ? { r: this.data.removals } : {}),
      };
      await this.wal.append(rec, true);
      this.dirty.clear();
      this.removalsDirty = false;
      await this.afterAppend(Promise.resolve());
    });
  }

  /** Folds the log into nvme-credentials.json now (shutdown; tests and tools that read the file). */
  checkpoint(): Promise<void> {
    return this.foldLock.run(() => this.lock.run(() => this.fold()));
  }

  async onApplicationShutdown(): Promise<void> {
    this.closed = true;
    if (this.timer) clearTimeout(this.timer);
    if (this.foldTimer) clearTimeout(this.foldTimer);
    await this.flush().catch(() => undefined);
    await this.checkpoint().catch((err) => this.log.error(`nvme-credentials.json not rewritten at shutdown (the log keeps every change): ${(err as Error).message}`));
  }

  private readonly dirty = new Set<string>();
  private removalsDirty = false;
  private timer: NodeJS.Timeout | null = null;
  private foldTimer: NodeJS.Timeout | null = null;

  private scheduleFlush(): void {
    if (this.timer) return;
    this.timer = setTimeout(() => {
      this.timer = null;
      void this.flush().catch(() => this.scheduleFlush());
    }, this.flushMs);
    this.timer.unref();
  }

  /**
   * Under the lock, after an append: with IPXE_CP_CHECKPOINT_MS=0 fold at once, here (once the
   * record's audit entries are written: written); else a big log starts a fold beside the changes
   * (foldBeside), and a quiet one is folded once it has been quiet. A fold that fails is tried
   * again then.
   */
  private async afterAppend(written: Promise<unknown>): Promise<void> {
    if (this.checkpointMs === 0) {
      await written;
      const folded = await this.fold().then(
        () => true,
        (err: Error) => (this.log.warn(`nvme-credentials.json not rewritten (the log keeps every change): ${err.message}`), false),
      );
      if (!folded) this.scheduleFold();
      return;
    }
    if (this.wal.bytes >= Math.max(WAL_FOLD_BYTES, this.fileBytes / 4)) void written.then(() => this.startFold(), () => undefined);
    else this.scheduleFold();
  }

  /** Set at shutdown: no fold is scheduled after it (a failed one is retried until then). */
  private closed = false;

  private scheduleFold(): void {
    if (this.closed) return;
    if (this.foldTimer) clearTimeout(this.foldTimer);
    this.foldTimer = setTimeout(() => {
      this.foldTimer = null;
      // With IPXE_CP_CHECKPOINT_MS=0 folds run under the lock, inline: never one beside them.
      if (this.checkpointMs === 0) void this.checkpoint().catch(() => this.scheduleFold());
      else this.startFold();
    }, this.checkpointMs || 1000);
    this.foldTimer.unref();
  }

  /** Folds run one at a time, a fold beside the changes or a checkpoint(): two must never rename over each other. */
  private readonly foldLock = new Mutex();
  /** The fold beside the changes in progress, if any. */
  private folding: Promise<void> | null = null;

  /** The fold beside the changes in progress (resolved: none); for tests and tools. */
  foldSettled(): Promise<void> {
    return this.folding ?? Promise.resolve();
  }

  private startFold(): void {
    if (this.folding || this.closed) return;
    this.folding = this.foldLock
      .run(() => this.foldBeside())
      .catch((err: Error) => {
        this.log.warn(`nvme-credentials.json not rewritten (the log keeps every change): ${err.message}`);
        this.scheduleFold();
      })
      .finally(() => (this.folding = null));
  }

  /**
   * A fold that holds the lock only to take the state and, after, to drop the log records the
   * file now holds: at 100,000 credentials rendering and writing the 28 MB file under the lock
   * took 0.33-0.42 s, once every ~20,000 rotations of a fleet-wide push, and every change and the
   * event loop itself waited for it (now: the longest turn ~60 ms, no change waits). The render
   * goes in slices; records appended meanwhile stay in the log. An edit of the file meanwhile is
   * not written over: the fold is left to the next try, which picks the edit up first.
   */
  private async foldBeside(): Promise<void> {
    const snap = await this.lock.run(async () => {
      this.pickUpHandEdit();
      if (this.nothingToFold()) return null;
      await this.requireAuditDurable();
      // Values are replaced, never changed in place (runOnView, applyDelta): the references are the state.
      const dirty = new Map([...this.dirty].map((id) => [id, this.data.credentials[id]]));
      return { entries: Object.entries(this.data.credentials), removals: this.data.removals, logBytes: this.wal.bytes, auditMax: this.walAuditMax, stamp: this.stamp, dirty, removalsDirty: this.removalsDirty };
    });
    if (!snap) return;
    const bytes = await renderCredentialsInSlices(snap.entries, snap.removals);
    try {
      await this.fs.writeAtomic(this.file, bytes, 0o600, {
        unchangedSince: snap.stamp,
        // The file being renamed is ours, not a hand edit: changes meanwhile must not read it again
        // (28 MB at 100,000), so they skip the check until the rename is done.
        beforeRename: (st) => {
          this.replacing = true;
          this.stamp = st;
          this.fileBytes = st.size;
        },
      });
    } catch (e) {
      throw e instanceof FileChangedError ? e : storageFailure(e, 'nvme-credentials.json');
    } finally {
      this.replacing = false;
    }
    await this.lock.run(async () => {
      for (const [id, v] of snap.dirty) if (this.data.credentials[id] === v) this.dirty.delete(id);
      if (snap.removalsDirty && this.data.removals === snap.removals) this.removalsDirty = false;
      await this.wal.dropFirst(snap.logBytes);
      if (this.walAuditMax === snap.auditMax) this.walAuditMax = 0;
    });
  }

  private nothingToFold(): boolean {
    return this.wal.count === 0 && !this.dirty.size && !this.removalsDirty;
  }

  /** The log is the only copy of its audit entries until operations.jsonl has them (a full disk): it is not dropped before. */
  private async requireAuditDurable(): Promise<void> {
    if (this.walAuditMax && this.audit && !(await this.audit.durableThrough(this.walAuditMax))) {
      throw new Error('audit entries carried by nvme-credentials.wal are not yet in operations.jsonl');
    }
  }

  /** Rewrites the file from memory and empties the log; a hand edit meanwhile is picked up first. */
  private async fold(): Promise<void> {
    if (this.nothingToFold()) return;
    await this.requireAuditDurable();
    for (let attempt = 1; ; attempt++) {
      try {
        await this.fs.writeAtomic(this.file, renderCredentialsFile(this.data), 0o600, { unchangedSince: this.stamp });
        break;
      } catch (e) {
        if (e instanceof FileChangedError && attempt < 3) {
          this.pickUpHandEdit();
          continue;
        }
        throw e instanceof FileChangedError ? e : storageFailure(e, 'nvme-credentials.json');
      }
    }
    this.stamp = this.fs.statSync(this.file);
    this.fileBytes = this.stamp?.size ?? 0;
    this.dirty.clear();
    this.removalsDirty = false;
    await this.wal.reset();
    this.walAuditMax = 0;
  }
}

function applyRecord(d: FileShape, rec: CredentialLogRecord): void {
  for (const [id, v] of Object.entries(rec.c ?? {})) {
    if (v === null) delete d.credentials[id];
    else d.credentials[id] = v;
  }
  if (rec.r) d.removals = rec.r;
}

/**
 * nvme-credentials.json as the control plane writes it: JSON, one credential a line, so a start
 * reads it in chunks and parses it line by line (at 100,000 credentials a 35 MB pretty-printed
 * file cost ~0.7 s as one Buffer, one string and one JSON.parse).
 */
export function renderCredentialsFile(d: FileShape): string {
  const lines = Object.entries(d.credentials).map(([id, c]) => `    ${JSON.stringify(id)}: ${JSON.stringify(c)}`);
  return `{\n  "version": 1,\n  "credentials": {\n${lines.length ? `${lines.join(',\n')}\n` : ''}  },\n  "removals": ${JSON.stringify(d.removals)}\n}\n`;
}

/** Credentials rendered a slice per turn of the event loop (renderCredentialsFile's text, as the bytes of each slice). */
const RENDER_SLICE = 5000;

export async function renderCredentialsInSlices(entries: [string, CredentialRecord][], removals: RemovalRecord[]): Promise<Buffer[]> {
  const parts: Buffer[] = [Buffer.from('{\n  "version": 1,\n  "credentials": {\n')];
  for (let i = 0; i < entries.length; i += RENDER_SLICE) {
    if (i > 0) await new Promise((r) => setImmediate(r));
    const lines = entries.slice(i, i + RENDER_SLICE).map(([id, c]) => `    ${JSON.stringify(id)}: ${JSON.stringify(c)}`);
    const last = i + RENDER_SLICE >= entries.length;
    parts.push(Buffer.from(`${lines.join(',\n')}${last ? '\n' : ',\n'}`));
  }
  parts.push(Buffer.from(`  },\n  "removals": ${JSON.stringify(removals)}\n}\n`));
  return parts;
}

/**
 * Reads nvme-credentials.json (missing: empty). The layout renderCredentialsFile writes is parsed
 * line by line as it is read; any other JSON (an older file, a hand edit) is parsed whole.
 */
export function readCredentialsFile(file: string, fs: FileSystem): FileShape {
  const fast = new FastCredentials();
  const lines = new LineSplitter((l) => fast.line(l));
  const found = fs.readChunksSync(file, (chunk) => {
    if (!fast.failed) lines.push(chunk);
  });
  if (!found) return parseCredentialsFile(file, null);
  lines.end();
  // The fast path checked each credential as it read it; anything else is parsed and checked whole.
  return fast.result() ?? parseCredentialsFile(file, fs.readTextSync(file));
}

/** renderCredentialsFile's layout, line by line; failed: some other text (parsed whole by the caller, which names any error). */
class FastCredentials {
  failed = false;
  private step: 'open' | 'version' | 'credentials' | 'entries' | 'removals' | 'close' | 'done' = 'open';
  private readonly credentials: Record<string, CredentialRecord> = {};
  private removals: RemovalRecord[] = [];
  /** The last entry had no comma: only the closing line may follow it. */
  private last = false;
  private entries = 0;

  line(l: string): void {
    if (this.failed) return;
    const ok = this.take(l);
    if (!ok) this.failed = true;
  }

  private take(l: string): boolean {
    switch (this.step) {
      case 'open':
        this.step = 'version';
        return l === '{';
      case 'version':
        this.step = 'credentials';
        return l === '  "version": 1,';
      case 'credentials':
        this.step = 'entries';
        return l === '  "credentials": {';
      case 'entries': {
        if (l === '  },') {
          this.step = 'removals';
          return true;
        }
        if (this.last || !l.startsWith('    "')) return false;
        const end = l.indexOf('": {', 5);
        if (end < 0 || l.lastIndexOf('\\', end) >= 0) return false;
        const id = l.slice(5, end);
        // An own "__proto__" key is JSON.parse's to make, not an assignment's.
        if (id === '__proto__') return false;
        const comma = l.endsWith(',');
        this.last = !comma;
        try {
          const v = JSON.parse(l.slice(end + 3, comma ? -1 : undefined)) as CredentialRecord;
          // A credential checkCredentials would refuse sends the file to the whole parse, which names it.
          if (credentialProblem(v) !== null) return false;
          v.agents ??= {};
          this.credentials[id] = v;
          this.entries++;
        } catch {
          return false;
        }
        return true;
      }
      case 'removals': {
        if (!l.startsWith('  "removals": ')) return false;
        try {
          this.removals = JSON.parse(l.slice(14)) as RemovalRecord[];
        } catch {
          return false;
        }
        this.step = 'close';
        return true;
      }
      case 'close':
        this.step = 'done';
        return l === '}';
      case 'done':
        return l.trim() === '';
    }
  }

  result(): FileShape | null {
    // A trailing comma before the closing line is not JSON: the whole parse says so.
    if (this.failed || this.step !== 'done' || (this.entries > 0 && !this.last)) return null;
    return { version: 1, credentials: this.credentials, removals: this.removals ?? [] };
  }
}

/** nvme-credentials.json checked as the control plane checks it; messages name the worker and the field, never a value. */
export function parseCredentialsFile(file: string, text: string | null): FileShape {
  if (text === null) return { version: 1, credentials: {}, removals: [] };
  let obj: Partial<FileShape>;
  try {
    obj = JSON.parse(text) as Partial<FileShape>;
  } catch (e) {
    throw new LedgerFileError(file, 1, `invalid JSON: ${(e as Error).message}`);
  }
  return checkCredentials(file, obj);
}

/** What is wrong with one credential, as the field and its fault (never its value); null when nothing. Both reads ask this. */
function credentialProblem(c: Partial<CredentialRecord> | null | undefined): string | null {
  if (typeof c?.dhchap_key !== 'string' || dhchapKeyError(c.dhchap_key)) return 'dhchap_key is not a DHHC-1 secret';
  if (typeof c.hostnqn !== 'string') return 'hostnqn is missing';
  return null;
}

function checkCredentials(file: string, obj: Partial<FileShape> | { credentials?: unknown; removals?: unknown }): FileShape {
  const credentials = (obj.credentials ?? {}) as Record<string, CredentialRecord>;
  for (const id in credentials) {
    const c = credentials[id];
    const problem = credentialProblem(c);
    if (problem !== null) throw new LedgerFileError(file, 1, `credentials.${id}.${problem}`);
    c.agents ??= {};
  }
  return { version: 1, credentials, removals: (obj.removals ?? []) as RemovalRecord[] };
}

/**
 * The credentials as a restart would see them (nvme-credentials.json + its log), read without
 * writing anything: for tools and tests that check what is on disk while a control plane runs.
 */
export function readCredentialsOnDisk(stateDir: string, fs: FileSystem): FileShape {
  const d = readCredentialsFile(path.join(stateDir, 'nvme-credentials.json'), fs);
  for (const rec of new ChangeLog<CredentialLogRecord>(path.join(stateDir, 'nvme-credentials.wal'), fs).loadSync(true)) applyRecord(d, rec);
  return d;
}
