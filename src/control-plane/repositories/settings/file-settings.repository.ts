import { Injectable, Logger, Optional } from '@nestjs/common';
import * as path from 'node:path';
import { FileChangedError, FileSystem, sameStamp, type FileStamp } from '../../../shared/files/file-system';
import { LedgerFileError } from '../../../shared/files/ledger-map';
import { ApiError } from '../../../shared/http/api-error';
import { AppConfig } from '../../config/app-config';
import type { TxAudit } from '../audit/audit.repository';
import { AuditedFileWrite } from '../audit/audited-file-write';
import { FileAuditRepository } from '../audit/file-audit.repository';
import { mergeKeys, SettingsFile, SettingsRepository } from './settings.repository';

/**
 * state/settings.json. A change writes its keys over the file as it is now: a hand edit made since
 * this process last read or wrote it is kept (merged: the change's own keys win); a broken edit
 * refuses the change naming file and line, nothing written; an edit that lands while the file is
 * written is merged and written again.
 */
@Injectable()
export class FileSettingsRepository extends SettingsRepository {
  private readonly log = new Logger('Settings');
  readonly file: string;
  /** settings.json as last read or written by this process (a different stamp: a hand edit). */
  private stamp: FileStamp | null = null;
  /** The document as last read or written. */
  private current: SettingsFile = {};
  /** settings.json with its audit entries as one commit (settings.wal carries them). */
  private readonly writer: AuditedFileWrite;

  constructor(
    config: AppConfig,
    private readonly fs: FileSystem,
    @Optional() audit?: FileAuditRepository,
  ) {
    super();
    this.file = path.join(config.stateDir, 'settings.json');
    this.writer = new AuditedFileWrite(this.file, path.join(config.stateDir, 'settings.wal'), fs, audit);
  }

  load(): Promise<SettingsFile> {
    const text = this.fs.readTextSync(this.file);
    this.stamp = this.fs.statSync(this.file);
    this.current = this.parse(text);
    this.writer.load();
    return Promise.resolve(this.current);
  }

  /** Resolves once the change and its audit entries are written (see AuditedFileWrite). */
  async save(keys: (keyof SettingsFile)[], next: SettingsFile, audits: TxAudit[] = []): Promise<SettingsFile> {
    for (let attempt = 1; ; attempt++) {
      const st = this.fs.statSync(this.file);
      let base = this.current;
      if (!sameStamp(st, this.stamp)) {
        try {
          base = this.parse(this.fs.readTextSync(this.file));
        } catch (e) {
          if (e instanceof LedgerFileError) throw new ApiError(500, `${e.message}; fix the hand edit, nothing was changed`);
          throw e;
        }
        this.log.warn(`picked up a hand edit of ${this.file}; merged with this change`);
      }
      const out = mergeKeys(base, keys, next);
      const text = JSON.stringify(out, null, 2) + '\n';
      try {
        await this.writer.write(text, audits, async () => {
          await this.fs.writeAtomic(this.file, text, 0o644, { unchangedSince: st });
          this.stamp = this.fs.statSync(this.file);
          this.current = out;
        });
      } catch (e) {
        if (e instanceof FileChangedError && attempt < 3) continue;
        throw e; // the exception filter names the file and the storage status
      }
      return out;
    }
  }

  /** Validates settings.json's text (null or blank: no settings); a bad one is a LedgerFileError naming file and line. */
  private parse(text: string | null): SettingsFile {
    if (text === null || text.trim() === '') return {};
    let parsed: unknown;
    try {
      parsed = JSON.parse(text);
    } catch (e) {
      throw new LedgerFileError(this.file, jsonErrorLine(text), `invalid JSON: ${(e as Error).message}`);
    }
    if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) {
      throw new LedgerFileError(this.file, 1, 'expected a JSON object');
    }
    const o = parsed as Record<string, unknown>;
    for (const k of ['auto_register', 'secure_registration', 'signature_enforcement']) {
      if (o[k] !== undefined && typeof o[k] !== 'boolean') throw new LedgerFileError(this.file, 1, `${k} must be true or false`);
    }
    const w = o.registration_window as Record<string, unknown> | null | undefined;
    if (w !== undefined && w !== null) {
      const iso = (v: unknown) => typeof v === 'string' && !Number.isNaN(Date.parse(v));
      if (typeof w !== 'object' || !iso(w.opened_at) || !iso(w.expires_at) || !(w.closed_at === null || w.closed_at === undefined || iso(w.closed_at))) {
        throw new LedgerFileError(this.file, 1, 'registration_window must have ISO opened_at, expires_at and closed_at (or null)');
      }
      if (!(w.max_devices === null || w.max_devices === undefined || (Number.isInteger(w.max_devices) && (w.max_devices as number) >= 1))) {
        throw new LedgerFileError(this.file, 1, 'registration_window.max_devices must be a positive integer or null');
      }
    }
    return parsed as SettingsFile;
  }
}

/** Line of a JSON syntax error (V8 gives a position only for some errors). */
function jsonErrorLine(text: string): number {
  const lines = text.split('\n');
  for (let k = 1; k <= lines.length; k++) {
    const prefix = lines.slice(0, k).join('\n');
    try {
      JSON.parse(prefix);
      return k;
    } catch (e) {
      const msg = (e as Error).message;
      const pos = /at position (\d+)/.exec(msg);
      // Errors at the very end of a prefix only mean "incomplete": read one more line.
      if (/end of JSON input/i.test(msg) || (pos && Number(pos[1]) >= prefix.length)) continue;
      return pos ? prefix.slice(0, Number(pos[1])).split('\n').length : k;
    }
  }
  return lines.length;
}
