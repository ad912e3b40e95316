import { Injectable, OnModuleInit } from '@nestjs/common';
import * as path from 'node:path';
import { badRequest } from '../common/api-error';
import { Clock } from '../common/clock';
import { normalizeMac } from '../common/mac';
import { AppConfig } from '../config/app-config';
import { FileSystem } from '../store/file-system';
import { LedgerFileError } from '../store/ledger-map';

export interface AuditEntry {
  id: number;
  ts: string;
  op: string;
  status: 'ok' | 'failed' | 'started';
  client?: string;
  [field: string]: unknown;
}

export type AuditFields = Omit<AuditEntry, 'id' | 'ts' | 'op' | 'status'> & { status?: AuditEntry['status'] };

/**
 * Append-only audit trail (state/operations.jsonl). Ids keep increasing across restarts: the
 * last id is read back from the file's tail at start. Appends are serialised in id order.
 */
@Injectable()
export class AuditService implements OnModuleInit {
  readonly file: string;
  private lastId = 0;
  private queue: Promise<void> = Promise.resolve();

  constructor(
    config: AppConfig,
    private readonly fs: FileSystem,
    private readonly clock: Clock,
  ) {
    this.file = path.join(config.stateDir, 'operations.jsonl');
  }

  onModuleInit(): void {
    const tail = this.fs.readTailSync(this.file, 64 * 1024);
    if (!tail) return;
    const lines = tail.split('\n').filter((l) => l.trim() !== '');
    const last = lines[lines.length - 1];
    let id: unknown;
    try {
      id = (JSON.parse(last) as { id?: unknown }).id;
    } catch {
      id = undefined;
    }
    if (typeof id !== 'number' || !Number.isInteger(id) || id < 0) {
      const all = this.fs.readTextSync(this.file) ?? '';
      const lineNo = all.replace(/\n+$/, '').split('\n').length;
      throw new LedgerFileError(this.file, lineNo, 'last audit entry is not a JSON object with an integer id');
    }
    this.lastId = id;
  }

  /** Records one operation; resolves once it is on disk. */
  record(op: string, fields: AuditFields = {}): Promise<AuditEntry> {
    const { status = 'ok', ...rest } = fields;
    const entry: AuditEntry = { id: ++this.lastId, ts: this.clock.isoNow(), op, status, ...rest };
    const line = JSON.stringify(entry) + '\n';
    const done = this.queue.then(() => this.fs.append(this.file, line));
    this.queue = done.catch(() => undefined);
    return done.then(() => entry);
  }

  query(q: { since?: number; limit?: number; mac?: string }): Promise<{ next_cursor: number; entries: AuditEntry[] }> {
    const mac = q.mac === undefined ? undefined : (normalizeMac(q.mac) ?? undefined);
    if (q.mac !== undefined && !mac) throw badRequest(`mac: invalid MAC address ${JSON.stringify(q.mac)}`);
    return this.list({ since: q.since ?? 0, limit: q.limit ?? 1000, mac });
  }

  async list(opts: { since: number; limit: number; mac?: string }): Promise<{ next_cursor: number; entries: AuditEntry[] }> {
    await this.queue;
    const entries: AuditEntry[] = [];
    for await (const line of this.fs.readLines(this.file)) {
      if (!line.trim()) continue;
      let e: AuditEntry;
      try {
        e = JSON.parse(line) as AuditEntry;
      } catch {
        continue;
      }
      if (!(e.id > opts.since)) continue;
      if (opts.mac && e.mac !== opts.mac && !(Array.isArray(e.macs) && e.macs.includes(opts.mac))) continue;
      entries.push(e);
      if (entries.length >= opts.limit) break;
    }
    return { next_cursor: entries.length ? entries[entries.length - 1].id : opts.since, entries };
  }
}
