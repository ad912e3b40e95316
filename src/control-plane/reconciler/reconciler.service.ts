import { Injectable, Logger, OnApplicationBootstrap, OnApplicationShutdown } from '@nestjs/common';
import { conflict } from '../../shared/http/api-error';
import { ReconcilerLease } from '../repositories/leases/reconciler-lease.repository';
import { SchedulerRegistry } from '@nestjs/schedule';
import { Clock } from '../common/clock';
import { secretSha12 } from '../../shared/nvme-keys';
import { AgentGateway } from '../storage-nodes/agent-gateway';
import { StorageNodeRegistry } from '../storage-nodes/storage-node-registry';
import { StorageNodesService } from '../storage-nodes/storage-nodes.service';
import { AuditService } from '../audit/audit.service';
import { AppConfig } from '../config/app-config';
import { CredentialRepository } from '../repositories/credentials/credential.repository';
import { AgentHostView, CredentialsService, PushOutcome } from '../credentials/credentials.service';
import { IscsiAccessService } from '../credentials/iscsi-access.service';
import type { ReconcileResultDto } from '../credentials/dto/credential.dto';
import { LedgerRepository } from '../repositories/ledger/ledger.repository';

/**
 * The credential reconciler (design card: "a scheduled reconciler that retries NVMe-oF
 * credential pushes"). Each pass lists the hosts of every agent concerned once, then: pushes what
 * is pending or failed once its backoff has passed (at once when the agent answers again after
 * being unreachable), pushes again where the agent lost the host or holds another key or other
 * links, removes revoked hosts, hosts of disks that are gone and of deleted workers, and hosts of
 * ours that no credential accounts for. Passes never overlap: a second caller joins the running one.
 */
@Injectable()
export class ReconcilerService implements OnApplicationBootstrap, OnApplicationShutdown {
  private readonly log = new Logger('Reconciler');
  private running: Promise<ReconcileResultDto> | null = null;

  constructor(
    private readonly credentials: CredentialsService,
    private readonly iscsiAccess: IscsiAccessService,
    private readonly creds: CredentialRepository,
    private readonly store: LedgerRepository,
    private readonly registry: StorageNodeRegistry,
    private readonly gateway: AgentGateway,
    private readonly storageNodes: StorageNodesService,
    private readonly audit: AuditService,
    private readonly clock: Clock,
    private readonly config: AppConfig,
    private readonly scheduler: SchedulerRegistry,
    private readonly lease: ReconcilerLease,
  ) {}

  /**
   * With several control planes on one store, one of them reconciles: the holder of the lease
   * (ReconcilerLease). The others try every IPXE_CP_LEASE_SECONDS and one takes over.
   */
  leader = true;
  private leaseTimer: NodeJS.Timeout | null = null;

  private async tryLead(): Promise<void> {
    const was = this.leader;
    this.leader = await this.lease.tryTake();
    if (this.leader === was) {
      if (!this.leader) this.waited = true;
      return;
    }
    this.log.log(this.leader ? `${this.config.nodeId} holds the reconciler lease` : `${this.config.nodeId} lost the reconciler lease`);
    // Audited when it moves: taken from another holder (or after losing it), not the first start.
    if (this.leader && this.waited) await this.audit.record('reconciler.lease', { node: this.config.nodeId, client: 'reconciler' });
    this.waited = true;
  }
  /** Set once this process waited for the lease (another held it) or lost it. */
  private waited = false;

  async onApplicationBootstrap(): Promise<void> {
    if (!this.config.reconciler) {
      this.leader = false;
      return;
    }
    this.leader = false;
    // Settled before the process serves: the first of several to start is the reconciler.
    await this.tryLead();
    this.leaseTimer = setInterval(() => void this.tryLead(), this.config.leaseSeconds * 1000);
    this.leaseTimer.unref();
    if (!this.config.reconcileSeconds) return;
    const t = setInterval(() => {
      if (this.leader) void this.pass().catch((err) => this.log.error(`reconciler pass failed: ${(err as Error).message}`));
    }, this.config.reconcileSeconds * 1000);
    t.unref();
    this.scheduler.addInterval('credential-reconciler', t);
  }

  onApplicationShutdown(): void {
    if (this.leaseTimer) clearInterval(this.leaseTimer);
    if (this.scheduler.doesExist('interval', 'credential-reconciler')) this.scheduler.deleteInterval('credential-reconciler');
  }

  /** One pass now, or the one already running. */
  private readonly passObservers: ((r: ReconcileResultDto, seconds: number) => void)[] = [];

  /** Called after every pass, idle ones included (metrics). */
  onPass(fn: (r: ReconcileResultDto, seconds: number) => void): void {
    this.passObservers.push(fn);
  }

  pass(): Promise<ReconcileResultDto> {
    if (!this.config.reconciler) return Promise.reject(conflict('the reconciler is off on this control plane (IPXE_CP_RECONCILER=false)'));
    if (!this.leader) return Promise.reject(conflict('the reconciler runs on the control plane that holds the lease (see the reconciler.lease audit entries); ask that one'));
    if (!this.running) {
      const t0 = performance.now();
      this.running = this.run()
        .then((r) => {
          for (const o of this.passObservers) o(r, (performance.now() - t0) / 1000);
          return r;
        })
        .finally(() => (this.running = null));
    }
    return this.running;
  }

  private async run(): Promise<ReconcileResultDto> {
    const started_at = this.clock.isoNow();
    const out: ReconcileResultDto = { started_at, finished_at: started_at, agents_checked: [], agents_unreachable: [], pushed: [], removed: [], failed: [], iscsi_access: [], not_due: 0 };
    const workers = this.store.read().workers;
    // Credentials of workers that no longer exist, or of an earlier worker of the same id (a crash
    // between the delete's commit and the credential's removal).
    for (const c of this.creds.all()) if (this.credentials.isLeftover(c)) await this.credentials.workerDeleted(c.worker_id, 'reconciler');
    for (const c of this.creds.all()) await this.credentials.markDesired(c.worker_id);

    const agents = new Set<string>();
    for (const c of this.creds.all()) for (const a of Object.keys(c.agents)) agents.add(a);
    for (const r of this.creds.removals()) agents.add(r.agent);
    for (const w of workers.values()) for (const d of w.disks) if (d.transport === 'nvme-tcp') agents.add(d.agent);
    const listings = new Map<string, Map<string, AgentHostView> | string>();
    await Promise.all(
      [...agents].sort().map(async (id) => {
        const a = this.registry.get(id);
        if (!a) return;
        try {
          const hosts = await this.gateway.call<AgentHostView[]>(a, 'GET', '/nvme/hosts', { timeoutMs: this.config.agentProbeTimeoutMs });
          listings.set(id, new Map((Array.isArray(hosts) ? hosts : []).map((h) => [h.hostnqn, h])));
          out.agents_checked.push(id);
          // /boot-vars reads the NVMe port from cached capabilities: fill the cache of an agent missing there.
          if (!this.storageNodes.cachedCapabilities(id)) await this.storageNodes.capabilities(a).catch(() => undefined);
        } catch (e) {
          listings.set(id, (e as Error).message);
          out.agents_unreachable.push(id);
        }
      }),
    );
    out.agents_checked.sort();
    out.agents_unreachable.sort();

    const now = this.clock.now().getTime();
    const jobs: Promise<void>[] = [];
    const note = (o: PushOutcome, kind: 'pushed' | 'removed') => {
      const e = { worker_id: o.worker_id, agent: o.agent, hostnqn: o.hostnqn, reason: o.reason, ...(o.error ? { error: o.error } : {}) };
      (o.ok ? out[kind] : out.failed).push(e);
    };
    for (const c of this.creds.all()) {
      for (const [agent, p] of Object.entries(c.agents)) {
        const listing = listings.get(agent);
        if (p.state === 'removing') {
          if (!this.credentials.isDue(p, now)) out.not_due++;
          else jobs.push(this.credentials.removeFrom(c.worker_id, agent, 'retry').then((o) => note(o, 'removed')));
          continue;
        }
        if (listing === undefined) continue; // agent not in the registry: nothing to talk to
        if (typeof listing === 'string') {
          if (p.state === 'pushed') continue;
          if (!this.credentials.isDue(p, now)) out.not_due++;
          else {
            jobs.push(this.credentials.recordUnreachable(c.worker_id, agent, listing));
            out.failed.push({ worker_id: c.worker_id, agent, hostnqn: c.hostnqn, reason: 'retry', error: listing });
          }
          continue;
        }
        const h = listing.get(c.hostnqn);
        const want = (this.credentials.desired(c.worker_id).get(agent) ?? []).join();
        const drift = !h || h.dhchap_key_sha256 !== secretSha12(c.dhchap_key) || (h.subsystems ?? []).join() !== want;
        if (p.state === 'pushed') {
          if (drift) jobs.push(this.credentials.pushTo(c.worker_id, agent, 'drift').then((o) => note(o, 'pushed')));
          continue;
        }
        // Pending or failed: due by backoff, or at once when the failure was the agent being away.
        const wasAway = p.attempts > 0 && !p.rejected;
        if (this.credentials.isDue(p, now) || wasAway) {
          jobs.push(this.credentials.pushTo(c.worker_id, agent, p.attempts ? 'retry' : 'create').then((o) => note(o, 'pushed')));
        } else out.not_due++;
      }
    }
    for (const r of this.creds.removals()) {
      if (!this.credentials.isDue(r, now)) out.not_due++;
      else jobs.push(this.credentials.removeQueued(r).then((o) => note(o, 'removed')));
    }
    // Hosts of ours on an agent that no credential or queued removal accounts for (one set per
    // pass: a lookup per listed host, not a scan of every credential).
    const known = new Set<string>();
    for (const c of this.creds.all()) for (const a of Object.keys(c.agents)) known.add(`${c.hostnqn}\0${a}`);
    for (const r of this.creds.removals()) known.add(`${r.hostnqn}\0${r.agent}`);
    for (const [agent, listing] of listings) {
      if (typeof listing === 'string') continue;
      for (const hostnqn of listing.keys()) {
        if (!this.credentials.isOurHostNqn(hostnqn) || known.has(`${hostnqn}\0${agent}`)) continue;
        const worker_id = hostnqn.slice(hostnqn.indexOf(':host.') + 6);
        if (this.credentials.current(worker_id) && !this.credentials.current(worker_id)!.revoked && this.credentials.desired(worker_id).has(agent)) continue;
        jobs.push(
          this.credentials
            .removeQueued({ worker_id, hostnqn, agent, attempts: 0, last_error: null, last_attempt_at: null, next_attempt_at: null }, 'orphan: no credential of this control plane wants it')
            .then((o) => note(o, 'removed')),
        );
      }
    }
    await Promise.all(jobs);
    // iSCSI on LIO and stgt: initiator ACLs and CHAP follow the ledger and the credentials.
    const access = await this.iscsiAccess.reconcile();
    out.agents_checked = [...new Set([...out.agents_checked, ...access.checked])].sort();
    out.agents_unreachable = [...new Set([...out.agents_unreachable, ...access.unreachable])].sort();
    out.iscsi_access = access.outcomes.map((o) => ({ worker_id: o.worker_id, agent: o.agent, iqn: o.iqn, reason: o.reason, ...(o.error ? { error: o.error } : {}) }));
    const accessFailed = access.outcomes.filter((o) => !o.ok).length;
    out.finished_at = this.clock.isoNow();
    if (out.pushed.length || out.removed.length || out.failed.length || out.iscsi_access.length) {
      this.log.log(`pass: ${out.pushed.length} pushed, ${out.removed.length} removed, ${out.failed.length} failed, ${out.iscsi_access.length} iSCSI access set (${accessFailed} failed), ${out.not_due} waiting`);
      await this.audit.record('reconcile.pass', {
        ...(out.failed.length || accessFailed ? { status: 'failed' } : {}),
        pushed: out.pushed.length,
        removed: out.removed.length,
        failed: out.failed.length,
        iscsi_access: out.iscsi_access.length,
        iscsi_access_failed: accessFailed,
        not_due: out.not_due,
        agents_unreachable: out.agents_unreachable,
        client: 'reconciler',
      });
    }
    return out;
  }
}
