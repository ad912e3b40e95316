import { createHash } from 'node:crypto';
import * as path from 'node:path';
import { storageFailure } from '../../../shared/files/storage-error';
import type { FileSystem } from '../../../shared/files/file-system';
import { ChangeLog } from '../ledger/change-log';
import type { AuditEntry, TxAudit } from './audit.repository';
import type { FileAuditRepository } from './file-audit.repository';

/**
 * One change's intent, appended (fdatasync'ed) before the file is replaced: the audit entries
 * with their ids, and the SHA-256 of the text the change writes. At start the entries of a record
 * whose text is the file's are those of a committed change; a record whose text never reached the
 * file describes a change that did not happen, and is ignored.
 */
interface IntentRecord {
  seq: number;
  h: string;
  a: AuditEntry[];
}

const sha256 = (text: string) => createHash('sha256').update(text).digest('hex');

/**
 * A file replaced whole (settings.json) whose change and audit entries are one commit, as a
 * ledger commit's are: the entries' ids are reserved and the intent record appended to a small
 * log beside it before the file is replaced; the entries go out to operations.jsonl once it is,
 * and a kill in between is repaired at start by the ledger's recover (this log is one of the audit
 * trail's carriers). A record also carries the entries of earlier changes not yet written (a full
 * disk), so the last committed record always holds everything still missing; the log is emptied
 * once operations.jsonl has it all. A hand edit while the control plane is down, right after a
 * kill in that window, makes the last change's record match no file: its entries are then lost.
 */
export class AuditedFileWrite {
  private readonly wal: ChangeLog<IntentRecord>;
  /** Entries of committed changes not yet known to be in operations.jsonl. */
  private undurable: AuditEntry[] = [];

  constructor(
    private readonly file: string,
    logFile: string,
    private readonly fs: FileSystem,
    private readonly audit: FileAuditRepository | undefined,
    /** The log's mode: 0600 beside a file that holds secrets (its hash is in every record). */
    mode = 0o644,
  ) {
    this.wal = new ChangeLog<IntentRecord>(logFile, fs, mode);
    audit?.addCarrier(() => {
      try {
        return this.committed(new ChangeLog<IntentRecord>(logFile, fs).loadSync(true));
      } catch {
        return []; // a damaged log is load()'s to report
      }
    });
  }

  private loaded = false;

  /** At start (under the state lock; once): cuts a torn last record and keeps carrying what the committed ones carry. */
  load(): void {
    if (this.loaded) return;
    this.loaded = true;
    this.undurable = this.committed(this.wal.loadSync());
  }

  /**
   * Writes `text` by `replace` (which must replace the file whole) with `audits` as one commit.
   * Throws what the log or replace throw; then no entry is written. Resolves once the entries are
   * written too (or queued for retry while the disk refuses them).
   */
  async write(text: string, audits: TxAudit[], replace: () => Promise<void>): Promise<void> {
    if (audits.length && !this.audit) throw new Error(`a change of ${this.file} carries audit entries but no audit trail is wired`);
    const reserved = audits.length ? this.audit!.reserve(audits) : [];
    try {
      await this.logIntent(text, reserved);
      await replace();
    } catch (e) {
      if (reserved.length) this.audit!.cancel(reserved);
      throw e;
    }
    if (!reserved.length) return;
    this.undurable.push(...reserved);
    await this.audit!.fill(reserved);
  }

  /** The entries of the records whose text is the file's now (the changes that were committed). */
  private committed(records: IntentRecord[]): AuditEntry[] {
    if (!records.length) return [];
    const text = this.fs.readTextSync(this.file);
    const h = text === null ? null : sha256(text);
    const out = new Map<number, AuditEntry>();
    for (const r of records) if (r.h === h) for (const e of r.a ?? []) out.set(e.id, e);
    return [...out.values()].sort((x, y) => x.id - y.id);
  }

  private async logIntent(text: string, reserved: AuditEntry[]): Promise<void> {
    if (this.audit && this.undurable.length && (await this.audit.durableThrough(this.undurable[this.undurable.length - 1].id))) this.undurable = [];
    if (!this.undurable.length) await this.wal.reset();
    if (!reserved.length && !this.undurable.length) return;
    const existed = this.fs.statSync(this.wal.file) !== null;
    try {
      await this.wal.append({ seq: this.wal.seq + 1, h: sha256(text), a: [...this.undurable, ...reserved] });
    } catch (e) {
      // Nothing on disk changes for a refused change: not even an empty log left behind.
      if (!existed) await this.fs.removeDurable(this.wal.file).catch(() => undefined);
      throw storageFailure(e, path.basename(this.wal.file));
    }
  }
}
