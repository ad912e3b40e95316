import { Injectable, Logger, OnApplicationBootstrap, OnModuleDestroy } from '@nestjs/common';
import { Clock } from '../common/clock';
import { AppConfig } from '../config/app-config';
import { AuditPruned, AuditRepository } from '../repositories/audit/audit.repository';
import { AuditCursors } from './audit-cursors';

/** How often retention runs (and this control plane's follower holds are published). */
export const AUDIT_RETENTION_PERIOD_MS = 10 * 60_000;

/**
 * IPXE_CP_AUDIT_RETENTION_DAYS: every ten minutes the oldest entries past the retention are
 * dropped, never one above a cursor a follower used within IPXE_CP_AUDIT_CURSOR_HOLD_HOURS (on
 * PostgreSQL, a follower of any control plane). What was dropped is itself an audit entry,
 * `audit.retention`, so a follower that was away longer learns where its gap is.
 */
@Injectable()
export class AuditRetentionService implements OnApplicationBootstrap, OnModuleDestroy {
  private readonly log = new Logger('AuditRetention');
  private timer: NodeJS.Timeout | null = null;
  private running: Promise<AuditPruned | null> | null = null;

  constructor(
    private readonly config: AppConfig,
    private readonly repo: AuditRepository,
    private readonly cursors: AuditCursors,
    private readonly clock: Clock,
  ) {}

  /** Runs on every control plane, with or without a retention of its own: its followers' holds count for the others. */
  onApplicationBootstrap(): void {
    const tick = () => void this.run().catch((err) => this.log.warn(`audit retention pass failed: ${(err as Error).message}`));
    tick();
    this.timer = setInterval(tick, AUDIT_RETENTION_PERIOD_MS);
    this.timer.unref();
  }

  onModuleDestroy(): void {
    if (this.timer) clearInterval(this.timer);
  }

  /** One pass (a pass under way is joined): what was dropped, or null. */
  run(): Promise<AuditPruned | null> {
    return (this.running ??= this.pass().finally(() => (this.running = null)));
  }

  private async pass(): Promise<AuditPruned | null> {
    const now = this.clock.now().getTime();
    const held = this.cursors.lowest(now - this.config.auditCursorHoldMs);
    await this.repo.publishHold(this.config.nodeId, held);
    if (!this.config.auditRetentionDays) return null;
    const before = now - this.config.auditRetentionDays * 86_400_000;
    const dropped = await this.repo.prune(before, held ?? Number.MAX_SAFE_INTEGER, this.config.auditCursorHoldMs);
    if (dropped) {
      await this.repo.record('audit.retention', {
        ...dropped,
        retention_days: this.config.auditRetentionDays,
        ...(held !== null ? { held_cursor: held } : {}),
        client: 'retention',
      });
      this.log.log(`audit entries ${dropped.from_id}-${dropped.through_id} dropped (older than ${this.config.auditRetentionDays} days)`);
    }
    return dropped;
  }
}
