import { Injectable, Logger } from '@nestjs/common';
import { randomBytes } from 'node:crypto';
import { ApiError, badRequest, conflict, internal, notFound } from '../../shared/http/api-error';
import { normalizeId } from '../../shared/mac';
import { parseSize } from '../../shared/size';
import { AgentHttpError } from '../storage-nodes/agent-gateway';
import { AgentRecord, StorageNodeRegistry } from '../storage-nodes/storage-node-registry';
import { StorageNodesService } from '../storage-nodes/storage-nodes.service';
import { AuditService } from '../audit/audit.service';
import type { CreatedLunDto } from '../../shared/agent-contract/luns.dto';
import { CredentialsService } from '../credentials/credentials.service';
import { RolloutsService } from '../masters/rollouts.service';
import { AppConfig } from '../config/app-config';
import { IscsiAccessService } from '../credentials/iscsi-access.service';
import { LedgerRepository } from '../repositories/ledger/ledger.repository';
import { Mutex } from '../../shared/files/mutex';
import { CdRecord, DiskMode, DiskRecord, targetName, WorkerRecord, WorkerState, withoutTarget } from '../repositories/ledger/records';
import type { BatchDiskDto, BatchDiskResultDto, CreateDiskDto, DiskSpecDto } from './dto/disk.dto';

export function workerState(w: Pick<WorkerRecord, 'cd' | 'disks'>): WorkerState {
  return w.cd ? 'installing' : w.disks.length ? 'ready' : 'registered';
}

interface Planned {
  agent: AgentRecord;
  transport: 'iscsi' | 'nvme-tcp';
  name: string;
  filename: string;
  os_tag: string;
  /** lio, stgt: the initiator IQNs the target admits. */
  initiators?: string[];
  /** The master's maintenance disk (one per master over the fleet). */
  maintenance?: boolean;
}

/**
 * System disks: a target on an agent plus a ledger record, kept consistent. Agent calls happen
 * outside the ledger lock (a clone can take a while); a reservation per (worker, os, os_version)
 * stops a concurrent duplicate; a ledger write that fails after the agent made the target deletes
 * the target again.
 */
@Injectable()
export class DisksService {
  private readonly log = new Logger('Disks');
  private readonly reserved = new Set<string>();
  private readonly workerLocks = new Map<string, Mutex>();

  constructor(
    private readonly store: LedgerRepository,
    private readonly storageNodes: StorageNodesService,
    private readonly registry: StorageNodeRegistry,
    private readonly audit: AuditService,
    private readonly credentials: CredentialsService,
    private readonly iscsiAccess: IscsiAccessService,
    private readonly rollouts: RolloutsService,
    private readonly config: AppConfig,
  ) {}

  /**
   * Serialises the target-changing operations of one worker (disk create/delete, worker delete):
   * a worker deleted while its disk is being made could otherwise leave an orphan target.
   */
  forWorker<R>(id: string, fn: () => Promise<R>): Promise<R> {
    let m = this.workerLocks.get(id);
    if (!m) this.workerLocks.set(id, (m = new Mutex()));
    const lock = m;
    return lock.run(fn).finally(() => {
      if (!lock.busy) this.workerLocks.delete(id);
    });
  }

  async create(rawId: string, dto: CreateDiskDto, client: string): Promise<WorkerRecord> {
    const id = this.parseId(rawId);
    return this.forWorker(id, () => this.createLocked(id, dto, client));
  }

  /** The maintenance writer's disk of a master (MaintenanceService): a persistent clone of its latest version, one per master. */
  async createMaintenance(rawId: string, dto: CreateDiskDto, client: string): Promise<WorkerRecord> {
    const id = this.parseId(rawId);
    return this.forWorker(id, () => this.createLocked(id, dto, client, true));
  }

  private async createLocked(id: string, dto: CreateDiskDto, client: string, maintenance = false): Promise<WorkerRecord> {
    this.checkSpec(dto);
    const key = this.reserve(id, dto);
    try {
      const w = this.store.read().workers.get(id);
      if (!w) throw notFound(`worker not found: ${id}`);
      this.checkNoDisk(w, dto);
      this.checkNameable(id, dto.disk_agent ? [this.pinned(dto.disk_agent)] : this.registry.all().filter((a) => a.enabled && a.role.disk));
      const agent = dto.disk_agent ? this.pinned(dto.disk_agent) : await this.place(dto, new Map());
      const plan = await this.plan(id, dto, agent);
      return await this.execute(id, dto, { ...plan, ...(maintenance ? { maintenance } : {}) }, client);
    } finally {
      this.reserved.delete(key);
    }
  }

  async batch(dto: BatchDiskDto, client: string): Promise<BatchDiskResultDto> {
    this.checkSpec(dto);
    const out: BatchDiskResultDto = { dry_run: dto.dry_run === true, succeeded: [], skipped: [], failed: [] };
    const extra = new Map<string, number>(); // disks placed by this batch, per agent
    const seen = new Set<string>();
    const jobs: { id: string; plan: Planned; key: string }[] = [];
    for (const t of dto.targets) {
      const id = t.worker_id;
      let agentId: string | null = t.agent ?? null;
      try {
        if (seen.has(id)) throw conflict(`duplicate worker in targets: ${id}`);
        seen.add(id);
        const w = this.store.read().workers.get(id);
        if (!w) throw notFound(`worker not found: ${id}`);
        if (this.findDisk(w, dto)) {
          out.skipped.push({ worker_id: id, reason: `already has a ${dto.os}${dto.os_version ? ` ${dto.os_version}` : ''} system disk` });
          continue;
        }
        this.checkNameable(id, t.agent ? [this.pinned(t.agent)] : this.registry.all().filter((a) => a.enabled && a.role.disk));
        const agent = t.agent ? this.pinned(t.agent) : await this.place(dto, extra);
        agentId = agent.id;
        extra.set(agent.id, (extra.get(agent.id) ?? 0) + 1);
        const plan = await this.plan(id, dto, agent);
        if (out.dry_run) {
          out.succeeded.push({ worker_id: id, agent: agent.id, iqn: plan.name });
          continue;
        }
        const key = this.reserve(id, dto);
        jobs.push({ id, plan, key });
      } catch (e) {
        out.failed.push({ worker_id: id, agent: agentId, error: (e as Error).message });
      }
    }
    // Execute item by item, several at a time; one failure leaves the others done.
    const queue = [...jobs];
    const workers = Array.from({ length: Math.min(8, queue.length) }, async () => {
      for (let job = queue.shift(); job; job = queue.shift()) {
        try {
          await this.forWorker(job.id, () => this.execute(job.id, dto, job.plan, client, true));
          out.succeeded.push({ worker_id: job.id, agent: job.plan.agent.id, iqn: job.plan.name });
        } catch (e) {
          out.failed.push({ worker_id: job.id, agent: job.plan.agent.id, error: (e as Error).message });
        } finally {
          this.reserved.delete(job.key);
        }
      }
    });
    await Promise.all(workers);
    const order = new Map(dto.targets.map((t, i) => [t.worker_id, i]));
    out.succeeded.sort((a, b) => order.get(a.worker_id)! - order.get(b.worker_id)!);
    out.failed.sort((a, b) => (order.get(a.worker_id) ?? 0) - (order.get(b.worker_id) ?? 0));
    if (!out.dry_run) {
      await this.audit.record('worker.disk.batch', {
        os: dto.os,
        type: dto.type,
        succeeded: out.succeeded.length,
        skipped: out.skipped.length,
        failed: out.failed.length,
        client,
      });
    }
    return out;
  }

  async remove(rawId: string, rawOs: string, deleteFile: boolean, ignoreMissing: boolean, osVersion: string | undefined, client: string): Promise<WorkerRecord> {
    const id = this.parseId(rawId);
    return this.forWorker(id, () => this.removeLocked(id, rawOs, deleteFile, ignoreMissing, osVersion, client));
  }

  private async removeLocked(id: string, rawOs: string, deleteFile: boolean, ignoreMissing: boolean, osVersion: string | undefined, client: string): Promise<WorkerRecord> {
    const os = rawOs.toLowerCase();
    if (!/^[a-z0-9-]{1,32}$/.test(os)) throw badRequest(`os: invalid ${JSON.stringify(rawOs)}`);
    const w = this.store.read().workers.get(id);
    if (!w) throw notFound(`worker not found: ${id}`);
    const matches = w.disks.filter((d) => d.os === os && (osVersion === undefined || d.os_version === osVersion));
    if (!matches.length) throw notFound(`worker ${id} has no ${os} system disk`);
    if (matches.length > 1) throw badRequest(`os_version: required, ${id} has several ${os} disks (${matches.map((d) => d.os_version).join(', ')})`);
    const disk = matches[0];
    await this.deleteTarget(disk, deleteFile, ignoreMissing, id, client);
    const updated = await this.store.exclusive(() =>
      this.store.commit((tx) => {
        const cur = tx.workers.get(id);
        if (!cur) throw notFound(`worker not found: ${id}`);
        const disks = withoutTarget(cur.disks, disk);
        const wasDefault = (cur.default_disk !== null && cur.default_disk === disk.os_tag) || (cur.default_os === os && !disks.some((d) => d.os === os));
        const next: WorkerRecord = {
          ...cur,
          disks,
          default_os: wasDefault ? null : cur.default_os,
          default_disk: wasDefault ? null : cur.default_disk,
          boot: wasDefault && cur.boot.menu_default === os ? { ...cur.boot, menu_default: null } : cur.boot,
        };
        next.state = workerState(next);
        tx.workers.set(id, next);
        tx.audit('worker.disk.delete', { worker_id: id, os, agent: disk.agent, iqn: targetName(disk), delete_file: deleteFile, client });
        return next;
      }),
    );
    // One link fewer on that agent, or the host leaves it with the worker's last disk there.
    if (disk.transport === 'nvme-tcp') await this.credentials.syncWorker(id, 'delete');
    return updated;
  }

  /** Agent-side delete of one disk (used by disk and worker deletion). */
  async deleteTarget(disk: DiskRecord | CdRecord, deleteFile: boolean, ignoreMissing: boolean, workerId: string, client: string): Promise<void> {
    const a = this.registry.get(disk.agent);
    const name = targetName(disk);
    if (!a) {
      if (ignoreMissing) return;
      throw notFound(`agent not found: ${disk.agent} (ignore_missing_target=true to drop the ledger entry)`);
    }
    try {
      await this.storageNodes.deleteTarget(a, name, deleteFile, ignoreMissing);
      await this.audit.record('agent.delete_disk', { worker_id: workerId, agent: a.id, iqn: name, delete_file: deleteFile, client });
    } catch (e) {
      await this.audit.record('agent.delete_disk', { status: 'failed', worker_id: workerId, agent: a.id, iqn: name, error: (e as Error).message, client });
      throw e;
    }
  }

  /** Creates the CD target of an install ISO on the first reachable enabled cd-role agent. */
  async createCd(workerId: string, iso: string, client: string): Promise<CdRecord> {
    const candidates = this.registry.all().filter((a) => a.enabled && a.role.cd).sort((a, b) => a.id.localeCompare(b.id));
    if (!candidates.length) throw badRequest('windows_iso: no enabled agent with the cd role is configured');
    let lastErr: unknown;
    for (const a of candidates) {
      let caps;
      try {
        caps = await this.capabilities(a);
      } catch (e) {
        lastErr = e;
        continue;
      }
      const iqn = `${caps.base_iqn}:${workerId}.windows.iso`;
      try {
        const r = await this.storageNodes.createCd(a.id, { iso, iqn }, client);
        return { agent: a.id, iqn: r.iqn, iso, backing: r.backing };
      } catch (e) {
        if (e instanceof AgentHttpError) throw e; // the agent said no (iso not found, ...): not a reachability problem
        lastErr = e;
      }
    }
    throw lastErr instanceof ApiError ? lastErr : new ApiError(503, `no cd-role agent reachable: ${(lastErr as Error)?.message}`);
  }

  // ---- internals ----

  private async execute(id: string, spec: DiskSpecDto, plan: Planned, client: string, setDefault = false): Promise<WorkerRecord> {
    // NVMe/TCP: the worker's credential exists before its first subsystem does. The subsystem is
    // made closed (no host); the push after the commit links exactly this worker's host.
    if (plan.transport === 'nvme-tcp') await this.credentials.ensureIssued(id, client);
    // iSCSI: the same credential gives the CHAP secret the target requires of the worker's initiator.
    if (plan.initiators) await this.credentials.ensureIssued(id, client, 'first iSCSI disk (CHAP)');
    // A revoked credential gives a locked target: the disk exists, no one logs in until a PUT issues a new one.
    const chap = plan.initiators ? this.iscsiAccess.targetChap(id).chap : undefined;
    // Without a version asked for, a disk of a master under rollout gets the fleet's version.
    // (The maintenance writer starts from the latest version, whatever the fleet runs.)
    if (spec.type === 'master' && spec.version === undefined && !plan.maintenance) {
      const v = this.rollouts.defaultVersion(spec.name!);
      if (v !== undefined) spec = { ...spec, version: v };
    }
    const body = {
      iqn: plan.name,
      filename: plan.filename,
      ...(spec.type === 'master' ? { master: spec.name, ...(spec.version ? { master_version: spec.version } : {}) } : { size: spec.size }),
      ...(plan.initiators ? { allowed_initiators: plan.initiators } : {}),
      ...(chap ? { chap } : {}),
    };
    const created: CreatedLunDto = await this.storageNodes.createDisk(plan.agent.id, body, client);
    const disk: DiskRecord = {
      agent: plan.agent.id,
      transport: plan.transport,
      ...(plan.transport === 'iscsi' ? { iqn: plan.name } : { nqn: plan.name }),
      filename: plan.filename,
      backing: created.backing,
      os: spec.os,
      os_version: spec.os_version ?? null,
      os_tag: plan.os_tag,
      source:
        spec.type === 'master'
          ? { type: 'master', name: spec.name!, ...((created.master_version ?? spec.version) ? { version: created.master_version ?? spec.version } : {}) }
          : { type: 'empty', size: spec.size! },
      ...(spec.mode === 'reset' ? { mode: 'reset' as const } : {}),
      ...(plan.maintenance ? { maintenance: true as const } : {}),
    };
    try {
      const w = await this.store.exclusive(() =>
        this.store.commit((tx) => {
          const cur = tx.workers.get(id);
          if (!cur) throw notFound(`worker not found: ${id} (deleted meanwhile)`);
          this.checkNoDisk(cur, spec);
          for (const other of tx.workers.values()) {
            if (other.disks.some((d) => d.os_tag === plan.os_tag)) throw conflict(`os_tag collision ${plan.os_tag}: retry`);
            // One maintenance writer per master, also against another control plane's at the same moment.
            const writer = plan.maintenance && other.disks.find((d) => d.maintenance && d.source.type === 'master' && d.source.name === spec.name);
            if (writer) throw conflict(`${spec.name} is in maintenance by ${other.worker_id} (${writer.os}); one maintenance writer at a time`);
          }
          const next: WorkerRecord = { ...cur, disks: [...cur.disks, disk], ...(setDefault ? { default_os: spec.os, default_disk: plan.os_tag } : {}) };
          next.state = workerState(next);
          tx.workers.set(id, next);
          tx.audit('worker.disk.create', { worker_id: id, os: spec.os, os_version: spec.os_version ?? null, agent: plan.agent.id, iqn: plan.name, os_tag: plan.os_tag, mode: spec.mode ?? 'persistent', ...(disk.source.type === 'master' ? { master: disk.source.name, ...(disk.source.version ? { version: disk.source.version } : {}) } : {}), client });
          return next;
        }),
      );
      // A failed push does not fail the create: it stays pending for the reconciler.
      if (plan.transport === 'nvme-tcp') await this.credentials.syncWorker(id, 'create');
      return w;
    } catch (e) {
      // The ledger never records a disk the agent does not have, nor leaves a target it forgot.
      this.log.error(`ledger write for ${plan.name} failed, deleting the target: ${(e as Error).message}`);
      await this.storageNodes
        .deleteTarget(plan.agent, plan.name, true, true)
        .then(() => this.audit.record('agent.delete_disk', { worker_id: id, agent: plan.agent.id, iqn: plan.name, reason: 'rollback: ledger write failed', client }))
        .catch((err) => this.audit.record('agent.delete_disk', { status: 'failed', worker_id: id, agent: plan.agent.id, iqn: plan.name, reason: 'rollback', error: (err as Error).message, client }));
      if (e instanceof ApiError && (e.getStatus() === 503 || e.getStatus() === 507)) {
        throw new ApiError(e.getStatus(), `${e.message}; the agent target was removed again`);
      }
      if (e instanceof ApiError) throw e;
      throw internal(`ledger write failed, target removed again: ${(e as Error).message}`);
    }
  }

  private async plan(id: string, spec: DiskSpecDto, agent: AgentRecord): Promise<Planned> {
    const caps = await this.capabilities(agent);
    const nvme = caps.transport === 'nvme-tcp' || caps.backend === 'nvmet';
    const os_tag = this.newTag();
    // The agent says its kernel cannot serve this (no TLS, no DH-HMAC-CHAP): nothing is made.
    if (caps.kernel?.missing?.length) throw conflict(`agent ${agent.id} cannot serve disks: ${caps.kernel.missing.join('; ')}; nothing was created`);
    if (spec.mode === 'reset') this.checkReflink(agent, caps);
    if (nvme) {
      if (!caps.base_nqn) throw new ApiError(502, `agent ${agent.id} reports no base_nqn`);
      return { agent, transport: 'nvme-tcp', name: `${caps.base_nqn}:${id}.${os_tag}`, filename: `${id}.${os_tag}.img`, os_tag };
    }
    if (!caps.base_iqn) throw new ApiError(502, `agent ${agent.id} reports no base_iqn`);
    if (id.includes('_')) this.checkNameable(id, []);
    // LIO and stgt close the target to the one initiator name boot.ipxe.cfg gives this worker's
    // iPXE (`${base-iqn}:${hostname}`, the hostname from DHCP).
    const initiators = caps.backend === 'lio' || caps.backend === 'stgt' ? [`${caps.base_iqn}:${this.store.read().workers.get(id)?.hostname ?? id}`] : undefined;
    return { agent, transport: 'iscsi', name: `${caps.base_iqn}:${id}.${spec.os}`, filename: `${id}.${spec.os}.img`, os_tag, initiators };
  }

  private async capabilities(a: AgentRecord) {
    return this.storageNodes.cachedCapabilities(a.id) ?? (await this.storageNodes.capabilities(a));
  }

  /**
   * Placement: enabled, healthy disk-role agents (holding the master for type=master), the one
   * with the fewest disks first (ledger count + what this batch already placed), then by id.
   */
  private async place(spec: DiskSpecDto, extra: Map<string, number>): Promise<AgentRecord> {
    const candidates = this.registry.all().filter((a) => a.enabled && a.role.disk);
    if (!candidates.length) throw badRequest('no enabled agent with the disk role is configured');
    // Why each agent is not a candidate, so the answer tells the operator what to fix.
    const why: string[] = [];
    let notHolding = 0;
    const healthy = (
      await Promise.all(
        candidates.map(async (a) => {
          try {
            if (spec.type === 'master') {
              const masters = await this.storageNodes.mastersOf(a);
              const m = masters.find((x) => x.name === spec.name);
              if (m && (!spec.version || m.versions?.some((v) => v.version === spec.version))) return a;
              notHolding++;
              why.push(`${a.id}: ${m ? `does not hold version ${spec.version}` : 'does not hold it'}`);
              return null;
            }
            await this.capabilities(a);
            return a;
          } catch (e) {
            why.push(`${a.id}: ${(e as Error).message}`);
            return null;
          }
        }),
      )
    ).filter((a): a is AgentRecord => a !== null);
    if (!healthy.length) {
      const detail = why.length ? ` (${why.sort().join('; ')})` : '';
      // Every agent answered and none has it: the name is wrong, not the network (404, not "retry").
      if (spec.type === 'master' && notHolding === candidates.length) throw notFound(`master not found on any enabled disk agent: ${spec.name}${spec.version ? ` version ${spec.version}` : ''}${detail}`);
      throw new ApiError(503, spec.type === 'master' ? `no healthy disk agent holds master ${spec.name}${detail}` : `no healthy disk agent${detail}`);
    }
    const count = new Map<string, number>();
    for (const w of this.store.workers.values()) for (const d of w.disks) count.set(d.agent, (count.get(d.agent) ?? 0) + 1);
    const load = (a: AgentRecord) => (count.get(a.id) ?? 0) + (extra.get(a.id) ?? 0);
    return healthy.sort((a, b) => load(a) - load(b) || a.id.localeCompare(b.id))[0];
  }

  private pinned(id: string): AgentRecord {
    const a = this.storageNodes.withRole(id, 'disk');
    if (!a.enabled) throw badRequest(`agent ${a.id} is disabled (drained): no new disks`);
    return a;
  }

  private checkSpec(spec: DiskSpecDto): void {
    if (spec.type === 'master' && !spec.name) throw badRequest('name: required when type=master');
    if (spec.type === 'empty' && !spec.size) throw badRequest('size: required when type=empty');
    if (spec.type === 'master' && spec.size) throw badRequest('size: only with type=empty');
    if (spec.type === 'empty' && spec.name) throw badRequest('name: only with type=master');
    if (spec.type === 'empty' && spec.version !== undefined) throw badRequest('version: only with type=master');
    if (spec.size) parseSize('size', spec.size); // the range too, before any agent is called
    if (spec.mode === 'reset' && spec.type !== 'master') throw badRequest('mode: reset needs type=master (a disk is restored to the master it was cloned from)');
  }

  /**
   * PUT .../luns/disk/{os_tag}/mode: persistent or reset from now on (reset: the next boot
   * restores the disk). Refused for a disk not cloned from a master, or on an agent whose
   * DISK_DIR cannot reflink (as last reported).
   */
  async setMode(rawId: string, osTag: string, mode: DiskMode, client: string): Promise<WorkerRecord> {
    const id = this.parseId(rawId);
    return this.forWorker(id, async () => {
      const w = this.store.read().workers.get(id);
      if (!w) throw notFound(`worker not found: ${id}`);
      const disk = w.disks.find((d) => d.os_tag === osTag);
      if (!disk) throw notFound(`disk not found: ${id} has no disk with os_tag ${osTag} (disks: ${w.disks.map((d) => `${d.os}: ${d.os_tag}`).join(', ') || 'none'})`);
      if (mode === 'reset') {
        if (disk.maintenance) throw badRequest(`mode: the ${disk.os} disk of ${id} is ${disk.source.type === 'master' ? disk.source.name : 'a master'}'s maintenance disk; a reset would throw its work away (discard the maintenance instead)`);
        if (disk.source.type !== 'master') throw badRequest(`mode: reset needs a disk cloned from a master; the ${disk.os} disk of ${id} was made empty`);
        const a = this.registry.get(disk.agent);
        if (!a) throw notFound(`agent not found: ${disk.agent}`);
        this.checkReflink(a, await this.capabilities(a));
      }
      return this.store.exclusive(() =>
        this.store.commit((tx) => {
          const cur = tx.workers.get(id);
          const i = cur?.disks.findIndex((d) => d.os_tag === osTag) ?? -1;
          if (!cur || i < 0) throw notFound(`disk not found: ${id} ${osTag} (deleted meanwhile)`);
          const { mode: _old, ...rest } = cur.disks[i];
          const disks = [...cur.disks];
          disks[i] = mode === 'reset' ? { ...rest, mode } : rest;
          tx.workers.set(id, { ...cur, disks });
          tx.audit('worker.disk.mode', { worker_id: id, os: disk.os, os_tag: osTag, iqn: targetName(disk), mode, previous: _old ?? 'persistent', client });
          return { ...cur, disks };
        }),
      );
    });
  }

  /**
   * POST .../luns/disk/{os_tag}/rebase: the disk restored to a master version (its rollout's
   * target by default), discarding what the worker wrote; the way a persistent disk follows a
   * rollout. Refused by the agent while an initiator holds a session on it.
   */
  async rebase(rawId: string, osTag: string, version: number | undefined, client: string): Promise<WorkerRecord> {
    const id = this.parseId(rawId);
    return this.forWorker(id, async () => {
      const w = this.store.read().workers.get(id);
      if (!w) throw notFound(`worker not found: ${id}`);
      const disk = w.disks.find((d) => d.os_tag === osTag);
      if (!disk) throw notFound(`disk not found: ${id} has no disk with os_tag ${osTag}`);
      if (disk.source.type !== 'master') throw badRequest(`the ${disk.os} disk of ${id} was made empty: there is no master version to rebase it to`);
      if (disk.maintenance) throw badRequest(`the ${disk.os} disk of ${id} is ${disk.source.name}'s maintenance disk: promote or discard it instead`);
      const a = this.registry.get(disk.agent);
      if (!a) throw notFound(`agent not found: ${disk.agent}`);
      const master = disk.source.name;
      const want = version ?? this.rollouts.targetOf(id, disk);
      const iqn = targetName(disk);
      let restored: number;
      try {
        restored = (await this.storageNodes.resetDisk(a, { iqn, master, ...(want ? { version: want } : {}) }, this.config.agentTimeoutMs)).version;
      } catch (e) {
        await this.audit.record('worker.disk.rebase', { status: 'failed', worker_id: id, os: disk.os, os_tag: osTag, iqn, master, version: want ?? null, error: (e as Error).message, client });
        throw e;
      }
      return this.store.exclusive(() =>
        this.store.commit((tx) => {
          const cur = tx.workers.get(id);
          const i = cur?.disks.findIndex((d) => d.os_tag === osTag) ?? -1;
          if (!cur || i < 0) throw notFound(`disk not found: ${id} ${osTag} (deleted meanwhile)`);
          const d = cur.disks[i];
          const disks = [...cur.disks];
          disks[i] = { ...d, source: { type: 'master', name: master, version: restored } };
          tx.workers.set(id, { ...cur, disks });
          tx.audit('worker.disk.rebase', { worker_id: id, os: d.os, os_tag: osTag, iqn, master, version: restored, previous: d.source.type === 'master' ? (d.source.version ?? null) : null, client });
          return { ...cur, disks };
        }),
      );
    });
  }

  /** reset is only ever a reflink: an agent whose DISK_DIR cannot do one is refused, naming why. */
  private checkReflink(a: AgentRecord, caps: { fs_type?: string; kernel?: { reflink?: boolean } | null }): void {
    if (caps.kernel?.reflink !== true) throw conflict(`mode: reset needs reflink, and agent ${a.id}'s DISK_DIR (${caps.fs_type ?? 'unknown filesystem'}) cannot reflink (btrfs or XFS can); nothing changed`);
  }

  /**
   * iSCSI names (IQNs) cannot hold `_` (tgtd refuses it): a worker id with one can only get an
   * NVMe/TCP disk. Refused before any agent is called when no agent that could take the disk is
   * known to speak NVMe/TCP (tags or cached capabilities), and again after placement.
   */
  private checkNameable(id: string, agents: AgentRecord[]): void {
    if (!id.includes('_')) return;
    if (agents.some((a) => a.tags.includes('nvmet') || this.storageNodes.cachedCapabilities(a.id)?.transport === 'nvme-tcp')) return;
    throw badRequest(`worker_id: ${id} contains '_', which iSCSI target names (IQN) cannot hold; rename the worker (letters, digits, '.', '-') or place the disk on an NVMe/TCP agent`);
  }

  private findDisk(w: WorkerRecord, spec: DiskSpecDto): DiskRecord | undefined {
    // iSCSI: one disk per os (menu.ipxe sanboots <hostname>.<os>); NVMe/TCP: one per (os, os_version).
    return w.disks.find((d) => d.os === spec.os && (d.transport !== 'nvme-tcp' || (d.os_version ?? null) === (spec.os_version ?? null)));
  }

  private checkNoDisk(w: WorkerRecord, spec: DiskSpecDto): void {
    if (this.findDisk(w, spec)) throw conflict(`worker ${w.worker_id} already has a ${spec.os} system disk`);
  }

  private reserve(id: string, spec: DiskSpecDto): string {
    const key = `${id}|${spec.os}|${spec.os_version ?? ""}`;
    if (this.reserved.has(key)) throw conflict(`a ${spec.os} disk for ${id} is being created`);
    this.reserved.add(key);
    return key;
  }

  /** 12 lower-case hex digits (48 random bits), re-checked for uniqueness when committed. */
  private newTag(): string {
    const used = new Set<string>();
    for (const w of this.store.workers.values()) for (const d of w.disks) if (d.os_tag) used.add(d.os_tag);
    for (;;) {
      const tag = randomBytes(6).toString('hex');
      if (!used.has(tag)) return tag;
    }
  }

  private parseId(raw: string): string {
    const id = normalizeId(raw);
    if (!id) throw badRequest(`worker_id: invalid worker id ${JSON.stringify(raw)}`);
    return id;
  }
}

