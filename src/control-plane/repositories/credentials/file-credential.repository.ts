import { Injectable, Logger, OnApplicationShutdown, OnModuleInit } from '@nestjs/common';
import * as path from 'node:path';
import { FileChangedError, FileSystem, sameStamp, type FileStamp } from '../../../shared/files/file-system';
import { LedgerFileError } from '../../../shared/files/ledger-map';
import { storageFailure } from '../../../shared/files/storage-error';
import { ApiError } from '../../../shared/http/api-error';
import { dhchapKeyError } from '../../../shared/nvme-keys';
import { AppConfig } from '../../config/app-config';
import { ChangeLog } from '../ledger/change-log';
import { applyDelta, CredentialRecord, CredentialRepository, FileShape, RemovalRecord, runOnView } from './credential.repository';

/** One change in nvme-credentials.wal: the new value of each credential it changed (null: deleted), the removals if they changed. */
interface CredentialLogRecord {
  seq: number;
  c: Record<string, CredentialRecord | null>;
  r?: RemovalRecord[];
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

  constructor(
    config: AppConfig,
    private readonly fs: FileSystem,
  ) {
    super();
    this.file = path.join(config.stateDir, 'nvme-credentials.json');
    this.wal = new ChangeLog<CredentialLogRecord>(path.join(config.stateDir, 'nvme-credentials.wal'), fs, 0o600);
    this.flushMs = Math.min(config.checkpointMs, 200);
    this.checkpointMs = config.checkpointMs;
  }

  onModuleInit(): void {
    this.stamp = this.fs.statSync(this.file);
    this.fileBytes = this.stamp?.size ?? 0;
    this.data = this.parseFile(this.fs.readTextSync(this.file));
    this.replayLog();
    this.revision++;
  }

  /** Applies the log's records on top of this.data: at start (a torn tail is cut), and on a hand edit of the file (read only). */
  private replayLog(readOnly = false): void {
    const log = readOnly ? new ChangeLog<CredentialLogRecord>(this.wal.file, this.fs) : this.wal;
    for (const rec of log.loadSync(readOnly)) applyRecord(this.data, rec);
  }

  /** nvme-credentials.json as last read or written by this process (a different stamp: a hand edit). */
  private stamp: FileStamp | null = null;

  /** Validates the file's text; messages name the worker and the field, never a value. */
  private parseFile(text: string | null): FileShape {
    return parseCredentialsFile(this.file, text);
  }

  /**
   * A hand edit of the file since this process last read or wrote it becomes the state (it is
   * never written over), with the log's changes on top (they were acknowledged); push bookkeeping
   * not yet flushed is then re-derived by the reconciler. A broken edit refuses the change, naming
   * the file, until it is fixed.
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
    this.replayLog(true);
    this.stamp = st;
    this.fileBytes = st?.size ?? 0;
    this.dirty.clear();
    this.removalsDirty = false;
    this.revision++;
  }

  change<R>(fn: (d: FileShape) => R): Promise<R> {
    return this.lock.run(async () => {
      this.pickUpHandEdit();
      const { r, delta } = runOnView(this.data, fn);
      if (!delta) return r;
      try {
        await this.wal.append({ seq: this.wal.seq + 1, c: Object.fromEntries(delta.credentials), ...(delta.removals ? { r: delta.removals } : {}) });
      } catch (e) {
        throw storageFailure(e, 'nvme-credentials.wal');
      }
      applyDelta(this.data, delta);
      // The record holds their latest values: nothing of them is left for the next flush.
      for (const id of delta.credentials.keys()) this.dirty.delete(id);
      if (delta.removals) this.removalsDirty = false;
      this.revision++;
      await this.afterAppend();
      return r;
    });
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
      await this.afterAppend();
    });
  }

  /** Folds the log into nvme-credentials.json now (shutdown; tests and tools that read the file). */
  checkpoint(): Promise<void> {
    return this.lock.run(() => this.fold());
  }

  async onApplicationShutdown(): Promise<void> {
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

  /** Under the lock, after an append: fold at once when the log is big, else once it is quiet. */
  private async afterAppend(): Promise<void> {
    if (this.checkpointMs === 0 || this.wal.bytes >= Math.max(WAL_FOLD_BYTES, this.fileBytes / 4)) {
      await this.fold().catch((err) => this.log.warn(`nvme-credentials.json not rewritten (the log keeps every change): ${(err as Error).message}`));
      return;
    }
    if (this.foldTimer) clearTimeout(this.foldTimer);
    this.foldTimer = setTimeout(() => {
      this.foldTimer = null;
      void this.checkpoint().catch(() => undefined);
    }, this.checkpointMs);
    this.foldTimer.unref();
  }

  /** Rewrites the file from memory and empties the log; a hand edit meanwhile is picked up first. */
  private async fold(): Promise<void> {
    if (this.wal.count === 0 && !this.dirty.size && !this.removalsDirty) return;
    for (let attempt = 1; ; attempt++) {
      try {
        await this.fs.writeAtomic(this.file, JSON.stringify(this.data, null, 2) + '\n', 0o600, { unchangedSince: this.stamp });
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
  }
}

function applyRecord(d: FileShape, rec: CredentialLogRecord): void {
  for (const [id, v] of Object.entries(rec.c ?? {})) {
    if (v === null) delete d.credentials[id];
    else d.credentials[id] = v;
  }
  if (rec.r) d.removals = rec.r;
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
  for (const [id, c] of Object.entries(obj.credentials ?? {})) {
    if (typeof c?.dhchap_key !== 'string' || dhchapKeyError(c.dhchap_key)) throw new LedgerFileError(file, 1, `credentials.${id}.dhchap_key is not a DHHC-1 secret`);
    if (typeof c.hostnqn !== 'string') throw new LedgerFileError(file, 1, `credentials.${id}.hostnqn is missing`);
    c.agents ??= {};
  }
  return { version: 1, credentials: obj.credentials ?? {}, removals: obj.removals ?? [] };
}

/**
 * The credentials as a restart would see them (nvme-credentials.json + its log), read without
 * writing anything: for tools and tests that check what is on disk while a control plane runs.
 */
export function readCredentialsOnDisk(stateDir: string, fs: FileSystem): FileShape {
  const d = parseCredentialsFile(path.join(stateDir, 'nvme-credentials.json'), fs.readTextSync(path.join(stateDir, 'nvme-credentials.json')));
  for (const rec of new ChangeLog<CredentialLogRecord>(path.join(stateDir, 'nvme-credentials.wal'), fs).loadSync(true)) applyRecord(d, rec);
  return d;
}
