import { Injectable } from '@nestjs/common';
import { badRequest } from '../../shared/http/api-error';
import { normalizeMac } from '../../shared/mac';
import { Clock } from '../common/clock';
import { AuditCursors } from './audit-cursors';
import { AuditEntry, AuditFields, AuditPage, AuditQuery, AuditRepository, TxAudit } from '../repositories/audit/audit.repository';

export type { AuditEntry, AuditFields, AuditQuery, TxAudit };

/**
 * The audit trail as the services use it: record an operation, follow the trail. Entries a
 * ledger commit carries are written with it by the ledger repository (Tx.audit), not here.
 */
@Injectable()
export class AuditService {
  constructor(
    private readonly repo: AuditRepository,
    private readonly cursors: AuditCursors,
    private readonly clock: Clock,
  ) {}

  /** Called with every entry as it is recorded (metrics count operations from here). */
  tap(fn: (e: AuditEntry) => void): void {
    this.repo.tap(fn);
  }

  /** Records one operation; resolves once it is durable (or queued for retry while storage refuses it). */
  record(op: string, fields: AuditFields = {}): Promise<AuditEntry> {
    return this.repo.record(op, fields);
  }

  /** Store import into an empty store: the entries with their own ids, in order. */
  restore(entries: AuditEntry[]): Promise<void> {
    return this.repo.restore(entries);
  }

  /** GET /operations. */
  query(q: AuditQuery): Promise<AuditPage> {
    const mac = q.mac === undefined ? undefined : (normalizeMac(q.mac) ?? undefined);
    if (q.mac !== undefined && !mac) throw badRequest(`mac: invalid MAC address ${JSON.stringify(q.mac)}`);
    // A follower reads on from here: retention keeps what lies above it.
    if (q.since) this.cursors.seen(q.since, this.clock.now().getTime());
    return this.repo.list({ ...q, since: q.since ?? 0, limit: q.limit ?? 1000, mac });
  }

  list(opts: AuditQuery & { since: number; limit: number }): Promise<AuditPage> {
    return this.repo.list(opts);
  }
}
