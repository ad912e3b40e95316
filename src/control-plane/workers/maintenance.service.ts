import { Injectable } from '@nestjs/common';
import { conflict, notFound } from '../../shared/http/api-error';
import { checkVersionRef } from '../../shared/master-version-ref';
import { Mutex } from '../../shared/files/mutex';
import type { MasterVersionDto } from '../../shared/agent-contract/luns.dto';
import { AuditService } from '../audit/audit.service';
import { MastersService } from '../masters/masters.service';
import { LedgerRepository } from '../repositories/ledger/ledger.repository';
import { DiskRecord, targetName, WorkerRecord } from '../repositories/ledger/records';
import { StorageNodesService } from '../storage-nodes/storage-nodes.service';
import { StorageNodeRegistry } from '../storage-nodes/storage-node-registry';
import { DisksService } from './disks.service';
import type { MaintenanceDto, PromoteMaintenanceDto, PromotedMaintenanceDto, StartMaintenanceDto } from './dto/maintenance.dto';

/**
 * The maintenance writer of a master (CCBoot's super client, Citrix's Maintenance version): one
 * worker at a time boots a writable clone of the master's latest version; promote makes that disk
 * the master's next version (numbered above every version on any agent, checksummed, read-only),
 * discard throws it away. Either way the maintenance disk goes.
 */
@Injectable()
export class MaintenanceService {
  /** One start/promote/discard at a time on this control plane (the ledger commit checks across control planes). */
  private readonly lock = new Mutex();

  constructor(
    private readonly store: LedgerRepository,
    private readonly disks: DisksService,
    private readonly masters: MastersService,
    private readonly registry: StorageNodeRegistry,
    private readonly storageNodes: StorageNodesService,
    private readonly audit: AuditService,
  ) {}

  get(rawName: string): MaintenanceDto {
    const [name] = checkVersionRef(rawName, 1);
    const m = this.find(name);
    if (!m) throw notFound(`${name} is not in maintenance`);
    return view(name, m.worker, m.disk);
  }

  start(rawName: string, dto: StartMaintenanceDto, client: string): Promise<MaintenanceDto> {
    const [name] = checkVersionRef(rawName, 1);
    return this.lock.run(async () => {
      const cur = this.find(name);
      if (cur) throw conflict(`${name} is in maintenance by ${cur.worker.worker_id} (${cur.disk.os}); one maintenance writer at a time`);
      let w: WorkerRecord;
      try {
        w = await this.disks.createMaintenance(dto.worker_id, { type: 'master', name, os: dto.os, ...(dto.disk_agent ? { disk_agent: dto.disk_agent } : {}) }, client);
      } catch (e) {
        await this.audit.record('master.maintenance.start', { status: 'failed', name, worker_id: dto.worker_id, os: dto.os, error: (e as Error).message, client });
        throw e;
      }
      const disk = w.disks.find((d) => d.maintenance && d.source.type === 'master' && d.source.name === name)!;
      await this.audit.record('master.maintenance.start', { name, worker_id: w.worker_id, os: disk.os, agent: disk.agent, version: disk.source.type === 'master' ? (disk.source.version ?? null) : null, client });
      return view(name, w, disk);
    });
  }

  /**
   * The maintenance disk becomes version N+1 (N: the highest version of the master on any agent)
   * on its agent, which refuses while the worker is logged in to it (shut it down first); then
   * the maintenance disk is deleted.
   */
  promote(rawName: string, dto: PromoteMaintenanceDto, client: string): Promise<PromotedMaintenanceDto> {
    const [name] = checkVersionRef(rawName, 1);
    return this.lock.run(async () => {
      const m = this.find(name);
      if (!m) throw notFound(`${name} is not in maintenance`);
      const a = this.registry.get(m.disk.agent);
      if (!a) throw notFound(`agent not found: ${m.disk.agent}`);
      const catalog = (await this.masters.list(client)).catalog.find((x) => x.name === name);
      const version = Math.max(0, ...(catalog?.versions.map((v) => v.version) ?? [])) + 1;
      let v: MasterVersionDto;
      try {
        v = await this.storageNodes.promoteMasterVersion(a, name, { iqn: targetName(m.disk), version, note: dto.note ?? '' });
      } catch (e) {
        await this.audit.record('master.maintenance.promote', { status: 'failed', name, worker_id: m.worker.worker_id, version, error: (e as Error).message, client });
        throw e;
      }
      const deleted = await this.dropDisk(m.worker, m.disk, client);
      await this.audit.record('master.maintenance.promote', { name, worker_id: m.worker.worker_id, agent: a.id, version: v.version, sha256: v.sha256, note: v.note, client });
      return { name, version: v.version, agent: a.id, sha256: v.sha256, disk_deleted: deleted };
    });
  }

  /** Throws the maintenance disk away (its target and file); the master is unchanged. */
  discard(rawName: string, client: string): Promise<MaintenanceDto> {
    const [name] = checkVersionRef(rawName, 1);
    return this.lock.run(async () => {
      const m = this.find(name);
      if (!m) throw notFound(`${name} is not in maintenance`);
      await this.disks.remove(m.worker.worker_id, m.disk.os, true, true, m.disk.os_version ?? undefined, client);
      await this.audit.record('master.maintenance.discard', { name, worker_id: m.worker.worker_id, os: m.disk.os, client });
      return view(name, m.worker, m.disk);
    });
  }

  // ---- internals ----

  private find(name: string): { worker: WorkerRecord; disk: DiskRecord } | null {
    for (const w of this.store.read().workers.values()) {
      const disk = w.disks.find((d) => d.maintenance && d.source.type === 'master' && d.source.name === name);
      if (disk) return { worker: w, disk };
    }
    return null;
  }

  /** After a promote: the version exists; a disk that cannot be deleted now stays for the operator (reported, not fatal). */
  private async dropDisk(w: WorkerRecord, d: DiskRecord, client: string): Promise<boolean> {
    try {
      await this.disks.remove(w.worker_id, d.os, true, true, d.os_version ?? undefined, client);
      return true;
    } catch {
      return false;
    }
  }
}

function view(name: string, w: WorkerRecord, d: DiskRecord): MaintenanceDto {
  return { name, worker_id: w.worker_id, os: d.os, os_tag: d.os_tag ?? null, agent: d.agent, target: targetName(d), from_version: d.source.type === 'master' ? (d.source.version ?? null) : null };
}
