/** One audit entry as stored and as GET /operations returns it. */
export interface AuditEntry {
  id: number;
  ts: string;
  op: string;
  status: 'ok' | 'failed' | 'started';
  client?: string;
  [field: string]: unknown;
}

export type AuditFields = Omit<AuditEntry, 'id' | 'ts' | 'op' | 'status'> & { status?: AuditEntry['status'] };

/** An entry a ledger commit carries (Tx.audit): it is written with the change or not at all. */
export interface TxAudit {
  op: string;
  fields: AuditFields;
}

export interface AuditQuery {
  since?: number;
  limit?: number;
  mac?: string;
  op?: string;
  worker_id?: string;
  agent?: string;
  tail?: number;
}

export type AuditPage = { next_cursor: number; entries: AuditEntry[] };

/** What a retention pass dropped: every entry with from_id <= id <= through_id. */
export interface AuditPruned {
  from_id: number;
  through_id: number;
}

/**
 * The audit trail: append-only, ids increasing in commit order. The engine (operations.jsonl or
 * the audit table) is chosen once by RepositoriesModule; the ledger repository of the same engine
 * writes a commit's entries atomically with it through the engine's own methods.
 */
export abstract class AuditRepository {
  protected readonly taps: ((e: AuditEntry) => void)[] = [];

  /** Called with every entry as it is recorded (metrics count operations from here). */
  tap(fn: (e: AuditEntry) => void): void {
    this.taps.push(fn);
  }

  /** Records one operation; resolves once it is durable (or queued for retry while storage refuses it). */
  abstract record(op: string, fields?: AuditFields): Promise<AuditEntry>;

  /** Store import into an empty store: the entries with their own ids; new ids continue after the last. */
  abstract restore(entries: AuditEntry[]): Promise<void>;

  /** Entries after `since` matching the filters, oldest first (`tail`: the last N). */
  abstract list(opts: AuditQuery & { since: number; limit: number }): Promise<AuditPage>;

  /**
   * Retention: drops the oldest entries written before `before` (ms), as a prefix of the trail,
   * never one above `keepAbove` (a follower's cursor) nor one above a cursor another control
   * plane published within `holdMs`. Null when nothing was dropped.
   */
  abstract prune(before: number, keepAbove: number, holdMs: number): Promise<AuditPruned | null>;

  /** The lowest cursor this control plane's followers hold (null: none), for the others' retention. */
  abstract publishHold(node: string, cursor: number | null): Promise<void>;
}

/** An entry as a new record: status defaults to ok. */
export function newEntry(ts: string, op: string, fields: AuditFields): Omit<AuditEntry, 'id'> {
  const { status = 'ok', ...rest } = fields;
  return { ts, op, status, ...rest };
}
