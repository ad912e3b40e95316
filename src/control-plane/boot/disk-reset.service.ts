import { Injectable, Logger } from '@nestjs/common';
import { AuditService } from '../audit/audit.service';
import { BootSessionsService } from '../boots/boot-sessions.service';
import { Clock } from '../common/clock';
import { AppConfig } from '../config/app-config';
import { LedgerRepository } from '../repositories/ledger/ledger.repository';
import { RolloutsService } from '../masters/rollouts.service';
import { DiskRecord, targetName, WorkerRecord } from '../repositories/ledger/records';
import { AgentHttpError } from '../storage-nodes/agent-gateway';
import { StorageNodeRegistry } from '../storage-nodes/storage-node-registry';
import { StorageNodesService } from '../storage-nodes/storage-nodes.service';

/** What restoring a worker's reset-mode disks at the start of a boot came to. */
export type ResetOutcome = { ok: true } | { ok: false; reason: string };

/**
 * Disks in `reset` mode are restored to their master at the start of every boot of their
 * worker: begun when the boot's first request reaches this control plane (its report), awaited
 * by /boot-vars before it answers, once per boot session. The agent restores by reflink in place
 * and refuses while an initiator holds a session on the disk (a lingering session of the last
 * boot is waited out, retried until IPXE_CP_DISK_RESET_TIMEOUT_MS); a reset not done in time
 * refuses the boot: a reset-mode worker never boots a disk that was not restored.
 */
@Injectable()
export class DiskResetService {
  private readonly log = new Logger('DiskReset');
  /** Per worker: the boot session (its start) whose reset this is, and its outcome. */
  private readonly current = new Map<string, { session: number; outcome: Promise<ResetOutcome> }>();

  constructor(
    private readonly store: LedgerRepository,
    private readonly registry: StorageNodeRegistry,
    private readonly storageNodes: StorageNodesService,
    private readonly sessions: BootSessionsService,
    private readonly audit: AuditService,
    private readonly config: AppConfig,
    private readonly clock: Clock,
    private readonly rollouts: RolloutsService,
  ) {
    // A boot's report starts the restore; /boot-vars then finds it under way (or done).
    sessions.onStarted((mac, stage) => {
      if (stage === 'report') void this.ensure(mac);
    });
  }

  /**
   * The reset of the boot in progress of `mac`'s worker (begun now if this boot has none yet), or
   * null when its worker has no reset-mode disk (the common case: three map reads).
   */
  ensure(mac: string): Promise<ResetOutcome> | null {
    const w = this.resetWorker(mac);
    if (!w) return null;
    // The restore of this boot: begun at its report, or by an earlier /boot-vars of it. A session
    // that is over (booted, failed, stuck) belongs to an earlier boot: this request (a boot that
    // sent no report) starts a new restore, as does a boot no session is known of.
    const latest = this.sessions.latest(mac);
    const cur = this.current.get(w.worker_id);
    if (cur && latest && cur.session === latest.session.started && latest.outcome === 'in_progress') return cur.outcome;
    const outcome = this.resetAll(w);
    this.current.set(w.worker_id, { session: latest?.outcome === 'in_progress' ? latest.session.started : -1, outcome });
    return outcome;
  }

  /** Whether a boot of `mac` restores disks (its worker has a reset-mode disk): what ensure checks first. */
  restoresOnBoot(mac: string): boolean {
    return this.resetWorker(mac) !== null;
  }

  private resetWorker(mac: string): WorkerRecord | null {
    const ledger = this.store.read();
    const d = ledger.devices.get(mac);
    if (d?.state !== 'bound' || !d.bound_worker_id) return null;
    const w = ledger.workers.get(d.bound_worker_id);
    return w && w.disks.some((x) => x.mode === 'reset') ? w : null;
  }

  private async resetAll(w: WorkerRecord): Promise<ResetOutcome> {
    const disks = w.disks.filter((x) => x.mode === 'reset');
    const results = await Promise.all(disks.map((d) => this.resetOne(w, d)));
    const failed = results.filter((r): r is string => r !== null);
    return failed.length ? { ok: false, reason: `disk reset failed: ${failed.join('; ')}` } : { ok: true };
  }

  /** One disk, retried while a session holds it, until the deadline; null when done, else why not. Audited either way. */
  private async resetOne(w: WorkerRecord, d: DiskRecord): Promise<string | null> {
    const iqn = targetName(d);
    const master = d.source.type === 'master' ? d.source.name : null;
    // The rollout's version once it has reached this worker, else the disk's own (a disk made
    // before versions has none: its agent restores the latest).
    const version = this.rollouts.targetOf(w.worker_id, d);
    let restored: number | undefined;
    const deadline = this.clock.now().getTime() + this.config.diskResetTimeoutMs;
    let error = master ? '' : 'the disk was not cloned from a master';
    let tries = 0;
    let ms = 0;
    while (master) {
      const a = this.registry.get(d.agent);
      if (!a) {
        error = `agent not found: ${d.agent}`;
        break;
      }
      tries++;
      try {
        const left = Math.max(100, deadline - this.clock.now().getTime());
        const r = await this.storageNodes.resetDisk(a, { iqn, master, ...(version ? { version } : {}) }, left);
        ms = r.ms;
        restored = r.version;
        error = '';
        break;
      } catch (e) {
        error = (e as Error).message;
        // Only a session held on the disk passes: the last boot's, about to go. Anything else is final.
        const held = e instanceof AgentHttpError && e.upstreamStatus === 409 && /holds a session/.test(error);
        if (!held || this.clock.now().getTime() + 500 >= deadline) break;
        await new Promise((r) => setTimeout(r, 500));
      }
    }
    // The disk holds another version now (a rollout reached it): the ledger says so.
    if (!error && restored !== undefined && d.source.type === 'master' && d.source.version !== restored) {
      await this.recordVersion(w.worker_id, d, restored).catch((e) => (error = `restored to version ${restored}, but the ledger could not record it: ${(e as Error).message}`));
    }
    await this.audit.record('disk.reset', {
      ...(error ? { status: 'failed', error } : {}),
      worker_id: w.worker_id,
      agent: d.agent,
      iqn,
      master,
      ...(restored ?? version ? { version: restored ?? version } : {}),
      tries,
      ...(error ? {} : { ms }),
      client: 'boot',
    });
    if (error) this.log.warn(`reset of ${iqn} (${w.worker_id}) failed: ${error}`);
    return error ? `${d.os} (${iqn}): ${error}` : null;
  }

  private recordVersion(workerId: string, d: DiskRecord, version: number): Promise<void> {
    const name = targetName(d);
    return this.store.exclusive(() =>
      this.store.commit((tx) => {
        const cur = tx.workers.get(workerId);
        const i = cur?.disks.findIndex((x) => x.agent === d.agent && targetName(x) === name) ?? -1;
        if (!cur || i < 0) return;
        const disk = cur.disks[i];
        if (disk.source.type !== 'master') return;
        const disks = [...cur.disks];
        disks[i] = { ...disk, source: { ...disk.source, version } };
        tx.workers.set(workerId, { ...cur, disks });
        tx.audit('worker.disk.version', { worker_id: workerId, os: disk.os, os_tag: disk.os_tag ?? null, iqn: name, master: disk.source.name, version, previous: disk.source.version ?? null, reason: 'reset at boot', client: 'boot' });
      }),
    );
  }
}
