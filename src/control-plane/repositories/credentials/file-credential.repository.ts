import { Injectable, Logger, OnApplicationShutdown, OnModuleInit } from '@nestjs/common';
import * as path from 'node:path';
import { FileChangedError, FileSystem, sameStamp, type FileStamp } from '../../../shared/files/file-system';
import { LedgerFileError } from '../../../shared/files/ledger-map';
import { storageFailure } from '../../../shared/files/storage-error';
import { ApiError } from '../../../shared/http/api-error';
import { dhchapKeyError } from '../../../shared/nvme-keys';
import { AppConfig } from '../../config/app-config';
import { CredentialRepository, FileShape } from './credential.repository';

/**
 * state/nvme-credentials.json: the only place the control plane keeps NVMe secrets. Mode 0600,
 * replaced atomically (temp, fsync, rename) on every change, read once at start. Changes run
 * one at a time (`change`), and a change is visible only once it is on disk.
 */
@Injectable()
export class FileCredentialRepository extends CredentialRepository implements OnModuleInit, OnApplicationShutdown {
  private readonly log = new Logger('Credentials');
  readonly file: string;

  private readonly flushMs: number;

  constructor(
    config: AppConfig,
    private readonly fs: FileSystem,
  ) {
    super();
    this.file = path.join(config.stateDir, 'nvme-credentials.json');
    this.flushMs = Math.min(config.checkpointMs, 200);
  }

  onModuleInit(): void {
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

  change<R>(fn: (d: FileShape) => R): Promise<R> {
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
    return this.lock.run(() => {
      this.pickUpHandEdit();
      const r = fn(this.data);
      this.revision++;
      this.scheduleFlush();
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
