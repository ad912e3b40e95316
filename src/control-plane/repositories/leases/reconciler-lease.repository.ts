import { Injectable } from '@nestjs/common';
import { Database, LOCK } from '../pg/database';

/** Which control plane runs the reconciler: the holder of this lease. */
export abstract class ReconcilerLease {
  /** Takes or keeps the lease: true while this process holds it. */
  abstract tryTake(): Promise<boolean>;
}

/** Files: one control plane per state directory (kurrent.lock), so it always holds the lease. */
@Injectable()
export class FileReconcilerLease extends ReconcilerLease {
  tryTake(): Promise<boolean> {
    return Promise.resolve(true);
  }
}

/**
 * PostgreSQL: a session-level advisory lock. A killed holder's connection closes and PostgreSQL
 * frees the lock; the others try every IPXE_CP_LEASE_SECONDS and one takes over.
 */
@Injectable()
export class PgReconcilerLease extends ReconcilerLease {
  constructor(private readonly db: Database) {
    super();
  }

  tryTake(): Promise<boolean> {
    return this.db.tryLease(LOCK.reconciler).catch(() => false);
  }
}
