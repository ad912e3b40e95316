import { Injectable, Logger } from '@nestjs/common';
import { randomBytes } from 'node:crypto';
import { deriveIscsiChapSecret, secretSha12 } from '../../shared/nvme-keys';
import { AgentGateway } from '../storage-nodes/agent-gateway';
import { StorageNodeRegistry } from '../storage-nodes/storage-node-registry';
import { AuditService } from '../audit/audit.service';
import type { LunChapDto, LunTargetDto, SetLunAccessDto } from '../../shared/agent-contract/luns.dto';
import { AppConfig } from '../config/app-config';
import { LedgerRepository } from '../repositories/ledger/ledger.repository';
import { DiskRecord, WorkerRecord } from '../repositories/ledger/records';
import { CredentialsService } from './credentials.service';

/** What a reconciler pass did to one iSCSI target's access. */
export interface AccessOutcome {
  worker_id: string;
  agent: string;
  iqn: string;
  reason: 'drift' | 'rotate' | 'revoke' | 'rename';
  ok: boolean;
  error?: string;
}

/**
 * iSCSI access of workers' disks (LIO and stgt agents): each target is closed to the one
 * initiator name the worker's iPXE uses (`<base-iqn>:<hostname>`) and requires CHAP with the user
 * name of the worker id and a secret derived from the worker's storage credential (the one that
 * also carries its NVMe-oF keys), so rotation and revocation reach iSCSI too. A revoked credential
 * locks the target with a random secret nobody holds. stgt disks made open by earlier versions are
 * closed by the reconciler's first pass (their ACL differs from the ledger's).
 */
@Injectable()
export class IscsiAccessService {
  private readonly log = new Logger('IscsiAccess');

  constructor(
    private readonly credentials: CredentialsService,
    private readonly registry: StorageNodeRegistry,
    private readonly gateway: AgentGateway,
    private readonly store: LedgerRepository,
    private readonly audit: AuditService,
    private readonly config: AppConfig,
  ) {
    credentials.onCredentialChange((id, reason) => this.syncWorker(id, reason));
  }

  /**
   * Whether a disk is an iSCSI target, closed to its worker's initiator name with CHAP: every one
   * is (LIO and stgt, the iSCSI backends, both have initiator ACLs and CHAP). Decided by the disk
   * record alone, never by a probe: after a control-plane restart the first boots of a storm come
   * before any agent was asked what it runs, and they must get their CHAP pair.
   */
  hasInitiatorAcl(disk: DiskRecord): boolean {
    return (disk.transport ?? 'iscsi') === 'iscsi' && !!disk.iqn;
  }

  /** The CHAP credential a worker's iSCSI disks require now: null when revoked, undefined without a credential. */
  chapOf(workerId: string): LunChapDto | null | undefined {
    const c = this.credentials.current(workerId);
    if (!c) return undefined;
    return c.revoked ? null : { userid: workerId, secret: deriveIscsiChapSecret(c.dhchap_key, workerId) };
  }

  /** The initiator name a worker's iPXE gives for a target: `<base of the target IQN>:<hostname>`. */
  initiatorOf(w: WorkerRecord, disk: DiskRecord): string {
    return `${disk.iqn!.slice(0, disk.iqn!.lastIndexOf(':'))}:${w.hostname}`;
  }

  /**
   * The CHAP credential to give a worker's iSCSI target now, and what it is: the live one
   * (`required`), a fresh random secret nobody holds when the credential is revoked (`locked`: the
   * target stays closed to everyone), or none without a credential (`none`: disks made before
   * CHAP; the reconciler issues a credential and comes back).
   */
  targetChap(workerId: string): { chap?: LunChapDto; state: 'required' | 'locked' | 'none' } {
    const chap = this.chapOf(workerId);
    if (chap) return { chap, state: 'required' };
    if (chap === null) return { chap: { userid: workerId, secret: randomBytes(18).toString('base64url') }, state: 'locked' };
    return { state: 'none' };
  }

  /** Whether what the agent reports differs from what the worker's disk should have. */
  drifted(w: WorkerRecord, disk: DiskRecord, t: LunTargetDto): boolean {
    if ((t.allowed_initiators ?? []).join() !== this.initiatorOf(w, disk)) return true;
    const c = this.credentials.current(w.worker_id);
    if (!c) return false;
    const live = secretSha12(deriveIscsiChapSecret(c.dhchap_key, w.worker_id));
    // Locked: any secret but the one the worker could still compute from its revoked credential.
    if (c.revoked) return !t.chap_secret_sha256 || t.chap_secret_sha256 === live;
    return t.chap_userid !== w.worker_id || t.chap_secret_sha256 !== live;
  }

  /** PUT /luns/access of one disk; audited with hashes only. Never throws: a failure is the reconciler's to retry. */
  async apply(w: WorkerRecord, disk: DiskRecord, reason: AccessOutcome['reason'], client: string): Promise<AccessOutcome> {
    const a = this.registry.get(disk.agent);
    const { chap, state } = this.targetChap(w.worker_id);
    const body: SetLunAccessDto = { iqn: disk.iqn!, allowed_initiators: [this.initiatorOf(w, disk)], ...(chap ? { chap } : {}) };
    let error: string | undefined;
    if (!a) error = `agent not found: ${disk.agent}`;
    else {
      try {
        await this.gateway.call(a, 'PUT', '/luns/access', { body, timeoutMs: this.config.agentProbeTimeoutMs * 2 });
      } catch (e) {
        error = (e as Error).message;
      }
    }
    await this.audit.record('disk.access', {
      ...(error ? { status: 'failed', error } : {}),
      worker_id: w.worker_id,
      agent: disk.agent,
      iqn: disk.iqn,
      reason,
      allowed_initiators: body.allowed_initiators,
      chap: state,
      ...(state === 'required' ? { chap_secret_sha256: secretSha12(chap!.secret) } : {}),
      client,
    });
    return { worker_id: w.worker_id, agent: disk.agent, iqn: disk.iqn!, reason, ok: !error, ...(error ? { error } : {}) };
  }

  /** After a rotation or revocation: every iSCSI disk of the worker gets the new rule now. */
  async syncWorker(id: string, reason: string): Promise<AccessOutcome[]> {
    const w = this.store.read().workers.get(id);
    if (!w) return [];
    const why = reason === 'delete' ? 'revoke' : 'rotate';
    try {
      return await Promise.all(w.disks.filter((d) => this.hasInitiatorAcl(d)).map((d) => this.apply(w, d, why, 'reconciler')));
    } catch (e) {
      this.log.error(`iSCSI access sync of ${id} failed, left to the reconciler: ${(e as Error).message}`);
      return [];
    }
  }

  /**
   * One reconciler pass over the iSCSI disks: a worker with iSCSI disks and no credential gets one
   * (disks made before CHAP), then every target whose ACL or CHAP differs from the ledger and
   * the credential is set again (a renamed worker, a rebuilt node, a rotation the agent missed).
   */
  async reconcile(): Promise<{ checked: string[]; unreachable: string[]; outcomes: AccessOutcome[] }> {
    const byAgent = new Map<string, { w: WorkerRecord; d: DiskRecord }[]>();
    for (const w of this.store.read().workers.values()) {
      for (const d of w.disks) {
        if (!this.hasInitiatorAcl(d)) continue;
        if (!this.credentials.current(w.worker_id)) await this.credentials.ensureIssued(w.worker_id, 'reconciler', 'iSCSI CHAP of its disks');
        byAgent.set(d.agent, [...(byAgent.get(d.agent) ?? []), { w, d }]);
      }
    }
    const checked: string[] = [];
    const unreachable: string[] = [];
    const outcomes: AccessOutcome[] = [];
    await Promise.all(
      [...byAgent].map(async ([agentId, disks]) => {
        const a = this.registry.get(agentId)!;
        let listing: LunTargetDto[];
        try {
          listing = await this.gateway.call<LunTargetDto[]>(a, 'GET', '/luns', { timeoutMs: this.config.agentProbeTimeoutMs });
          checked.push(agentId);
        } catch {
          unreachable.push(agentId);
          return;
        }
        const byIqn = new Map((Array.isArray(listing) ? listing : []).map((t) => [t.iqn, t]));
        for (const { w, d } of disks) {
          const t = byIqn.get(d.iqn);
          if (!t || !this.drifted(w, d, t)) continue; // a missing target is the agent's scan's to rebuild
          // An open target (no ACL: made so by an earlier version, or by hand) is drift, not a rename.
          const renamed = !!t.allowed_initiators?.length && t.allowed_initiators.join() !== this.initiatorOf(w, d);
          outcomes.push(await this.apply(w, d, renamed ? 'rename' : 'drift', 'reconciler'));
        }
      }),
    );
    return { checked: checked.sort(), unreachable: unreachable.sort(), outcomes };
  }
}
