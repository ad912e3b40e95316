import type { LedgerMap } from '../../../shared/files/ledger-map';
import type { AuditFields, TxAudit } from '../audit/audit.repository';
import type { DeviceRecord, WorkerRecord } from './records';

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
  constructor(base: { devices: LedgerMap<DeviceRecord>; workers: LedgerMap<WorkerRecord> }) {
    this.devices = new TxMap(base.devices);
    this.workers = new TxMap(base.workers);
  }
}

