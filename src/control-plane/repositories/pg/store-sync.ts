import { Injectable, Logger, OnApplicationBootstrap, OnApplicationShutdown } from '@nestjs/common';
import { Clock } from '../../common/clock';
import { AppConfig } from '../../config/app-config';
import { CacheFreshness } from '../cache-freshness';
import { Database } from './database';

/** A cache of PostgreSQL state: the version it has applied, and how to catch up. */
export interface SyncedPart {
  /** What this process has applied (ledger_changes id, or the document's version). */
  appliedVersion(): number;
  /** Brings the cache up to the database's state now. */
  refresh(): Promise<void>;
}

export type SyncedName = 'ledger' | 'settings' | 'credentials';
const SYNC_ORDER: SyncedName[] = ['ledger', 'settings', 'credentials'];

/**
 * Bounded staleness on PostgreSQL. Other control planes' commits normally arrive within
 * milliseconds through NOTIFY; a LISTEN connection can also die silently (a half-open TCP
 * connection, a proxy that dropped it), and then a process would serve old bindings, an old
 * signature-enforcement switch or a revoked credential indefinitely. Every IPXE_CP_SYNC_MS this
 * reads the version of each part in one query and catches up the parts that are behind. The
 * staleness is the age of the last round that completed: /healthz fails past
 * IPXE_CP_STALENESS_MAX_MS (a load balancer then takes the process out) and /metrics shows it.
 */
@Injectable()
export class StoreSync extends CacheFreshness implements OnApplicationBootstrap, OnApplicationShutdown {
  private readonly log = new Logger('StoreSync');
  private readonly parts = new Map<SyncedName, SyncedPart>();
  private syncedAt = 0;
  private timer: NodeJS.Timeout | null = null;
  private running: Promise<void> | null = null;
  private warned = false;

  constructor(
    config: AppConfig,
    private readonly clock: Clock,
    private readonly db: Database,
  ) {
    super(config);
  }

  register(name: SyncedName, part: SyncedPart): void {
    this.parts.set(name, part);
  }

  onApplicationBootstrap(): void {
    // Every part loaded from the database during init.
    this.syncedAt = this.clock.now().getTime();
    this.timer = setInterval(() => void this.round(), this.config.syncMs);
    this.timer.unref();
  }

  onApplicationShutdown(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
  }

  override stalenessMs(): number {
    return Math.max(0, this.clock.now().getTime() - this.syncedAt);
  }

  /** One round (never two at once): read every version, catch up what is behind. */
  round(): Promise<void> {
    this.running ??= this.roundOnce().finally(() => (this.running = null));
    return this.running;
  }

  private async roundOnce(): Promise<void> {
    const started = this.clock.now().getTime();
    try {
      const r = await this.db.query<{ ledger: string; settings: string | null; credentials: string | null }>(
        `SELECT (SELECT coalesce(max(id), 0) FROM ledger_changes) AS ledger,
                (SELECT version FROM documents WHERE name = 'settings') AS settings,
                (SELECT version FROM documents WHERE name = 'credentials') AS credentials`,
      );
      const row = r.rows[0];
      // Ledger first, whatever order the parts registered in (repositories start concurrently): a
      // setting seen here implies the ledger is at least at this round's snapshot, so a change
      // made before the setting (a binding moved, then enforcement on) is never seen after it.
      for (const name of SYNC_ORDER) {
        const part = this.parts.get(name);
        if (!part) continue;
        const v = Number(row[name] ?? 0);
        if (v > part.appliedVersion()) await part.refresh();
      }
      this.syncedAt = started;
      if (this.warned) this.log.log('caught up with the database again');
      this.warned = false;
    } catch (e) {
      if (!this.warned) this.log.warn(`could not catch up with the database (${(e as Error).message}); staleness grows until it answers`);
      this.warned = true;
    }
  }
}
