import { BootsService } from '../boots/boots.service';
import { BootService } from '../boot/boot.service';
import { randomBytes } from 'node:crypto';
import { Injectable, StreamableFile } from '@nestjs/common';
import { jsonArrayStream } from '../../shared/http/json-array-stream';
import { badRequest, conflict, notFound, unprocessable } from '../../shared/http/api-error';
import { Clock } from '../common/clock';
import { normalizeId, normalizeMac } from '../../shared/mac';
import { BindingService } from '../devices/binding.service';
import { DnsmasqService } from '../dnsmasq/dnsmasq.service';
import { CredentialsService } from '../credentials/credentials.service';
import { LedgerRepository, Tx } from '../repositories/ledger/ledger.repository';
import { CdRecord, DiskMode, newWorker, targetName, withoutTarget, WorkerRecord } from '../repositories/ledger/records';
import { StorageNodesService } from '../storage-nodes/storage-nodes.service';
import type { LunTargetDto } from '../../shared/agent-contract/luns.dto';
import { DisksService, workerState } from './disks.service';
import type { CreateDiskDto, DeleteDiskQueryDto } from './dto/disk.dto';
import type { BatchCreateWorkersDto, BatchCreateWorkersResultDto } from './dto/batch-workers.dto';
import type { BootConfigDto, CreateWorkerDto } from './dto/create-worker.dto';
import type { DefaultOsDto, DeleteWorkersBatchDto, DeleteWorkersBatchResultDto } from './dto/update-worker.dto';
import type { DeleteWorkerResultDto, WorkerDto, WorkerMacDto, WorkerStatusDto } from './dto/worker.dto';

type AuditCall = [op: string, fields: Record<string, unknown>];

@Injectable()
export class WorkersService {
  constructor(
    private readonly store: LedgerRepository,
    private readonly bindings: BindingService,
    private readonly dnsmasq: DnsmasqService,
    private readonly clock: Clock,
    private readonly disks: DisksService,
    private readonly storageNodes: StorageNodesService,
    private readonly credentials: CredentialsService,
    private readonly boot: BootService,
    private readonly boots: BootsService,
  ) {}

  /** Ledger entry + projected binding and readiness. */
  project(w: WorkerRecord, mac = this.store.boundMacByWorker().get(w.worker_id) ?? null): WorkerDto {
    const hasDisk = w.disks.length > 0;
    return {
      hostname: w.hostname,
      arch: w.arch,
      state: w.state,
      disks: w.disks.every((d) => d.mode) ? (w.disks as WorkerDto['disks']) : w.disks.map((d) => (d.mode ? d : { ...d, mode: 'persistent' as const })) as WorkerDto['disks'],
      cd: w.cd,
      worker_id: w.worker_id,
      mac,
      bound_device: mac,
      readiness: mac && hasDisk ? 'ready' : mac || hasDisk ? 'partial' : 'idle',
      boot_readiness: this.boot.readiness(w, mac),
      last_boot: mac ? this.boots.latest(mac) : null,
      default_os: w.default_os,
      default_disk: w.default_disk,
      boot: { ...w.boot },
    };
  }

  /** GET /workers: every worker as it stands now, written out a slice at a time (a WorkerDto array). */
  list(): StreamableFile {
    const bound = this.store.read().boundMacByWorker();
    return jsonArrayStream(Array.from(this.store.workers.values()), (w) => this.project(w, bound.get(w.worker_id) ?? null));
  }

  get(rawId: string): WorkerDto {
    return this.project(this.find(rawId));
  }

  async status(rawId: string): Promise<WorkerStatusDto> {
    const w = this.find(rawId);
    // One GET /luns per agent involved, in parallel.
    const agentIds = [...new Set([...w.disks.map((d) => d.agent), ...(w.cd ? [w.cd.agent] : [])])];
    const luns = new Map(
      await Promise.all(
        agentIds.map(async (id): Promise<[string, { targets?: LunTargetDto[]; error?: string }]> => {
          try {
            return [id, { targets: await this.storageNodes.luns(id) }];
          } catch (e) {
            return [id, { error: (e as Error).message }];
          }
        }),
      ),
    );
    const actual = (agent: string, name: string) => {
      const r = luns.get(agent)!;
      if (r.error) return { exists: false, target: null, error: r.error };
      const t = r.targets!.find((x) => (x.iqn ?? x.nqn) === name); // the agent names nvmet targets nqn
      return { exists: !!t, target: t ? { ...(t.nqn ? { nqn: t.nqn } : { iqn: t.iqn }), luns: t.luns.map((l) => ({ backing: l.backing ?? '' })) } : null };
    };
    return {
      worker: this.project(w),
      actual: {
        dnsmasq: await this.dnsmasq.lookup(w.hostname),
        disks: w.disks.map((d) => ({ os: d.os, ...actual(d.agent, targetName(d)) })),
        cd: w.cd ? actual(w.cd.agent, w.cd.iqn) : null,
      },
    };
  }

  async create(dto: CreateWorkerDto, client: string): Promise<WorkerDto> {
    let cd: CdRecord | null = null;
    if (dto.windows_iso !== undefined) {
      if (!/^[A-Za-z0-9][A-Za-z0-9._ -]{0,254}$/.test(dto.windows_iso)) throw badRequest(`windows_iso: not a plain ISO file name`);
      // Every ledger check first (nothing is written), so a refused worker leaves no CD target.
      await this.store.exclusive(() => {
        const tx = new Tx(this.store);
        this.createInTx(tx, dto.worker_id, dto.hostname, dto.arch, dto.boot);
        if (dto.mac) this.checkPooled(tx, dto.mac);
      });
      cd = await this.disks.createCd(dto.worker_id, dto.windows_iso, client);
    }
    try {
      return await this.createRecord(dto, cd, client);
    } catch (e) {
      if (cd) await this.disks.deleteTarget(cd, false, true, dto.worker_id, client).catch(() => undefined);
      throw e;
    }
  }

  private createRecord(dto: CreateWorkerDto, cd: CdRecord | null, client: string): Promise<WorkerDto> {
    return this.store.exclusive(async () => {
      const w = await this.bindings.commit((tx) => {
        const w = this.createInTx(tx, dto.worker_id, dto.hostname, dto.arch, dto.boot, cd);
        if (dto.mac) {
          this.checkPooled(tx, dto.mac);
          this.bindings.bind(tx, dto.mac, w.worker_id, false);
        }
        tx.audit('worker.create', { worker_id: w.worker_id, hostname: w.hostname, mac: dto.mac ?? null, client });
        if (dto.mac) this.auditBind(tx, dto.mac, w.worker_id, client);
        return w;
      }, client);
      return this.project(w);
    });
  }

  createBatch(dto: BatchCreateWorkersDto, client: string): Promise<BatchCreateWorkersResultDto> {
    const count = dto.count as unknown;
    if (typeof count !== 'number' || !Number.isInteger(count) || count < 1 || count > 100) {
      throw unprocessable(`count: required, an integer from 1 to 100 (got ${JSON.stringify(count ?? null)})`);
    }
    const prefix = (dto.name_prefix ?? 'worker-').trim().toLowerCase();
    if (!prefix) throw badRequest('name_prefix: must not be empty');
    const width = Math.max(2, String(count).length);
    const ids = Array.from({ length: count }, (_, i) => prefix + String(i + 1).padStart(width, '0'));
    const bad = ids.find((id) => normalizeId(id) !== id);
    if (bad) throw badRequest(`name_prefix: generates an invalid worker_id ${JSON.stringify(bad)}`);
    if (dto.macs && dto.macs.length !== count) {
      throw badRequest(`macs: length ${dto.macs.length} does not equal count ${count}`);
    }
    return this.store.exclusive(async () => {
      const out: BatchCreateWorkersResultDto = { succeeded: [], skipped: [], failed: [] };
      await this.bindings.commit((tx) => {
        ids.forEach((id, i) => {
          const rawMac = dto.macs?.[i];
          const mac = rawMac === undefined ? null : normalizeMac(rawMac);
          const item = { worker_id: id, hostname: id, mac: mac ?? rawMac ?? null };
          if (tx.workers.has(id)) return out.skipped.push({ ...item, reason: `worker already exists: ${id}` });
          try {
            if (rawMac !== undefined && !mac) throw badRequest(`invalid MAC address: ${rawMac}`);
            if (mac) this.checkPooled(tx, mac);
            this.createInTx(tx, id, undefined, dto.arch, dto.boot);
            if (mac) this.bindings.bind(tx, mac, id, false);
            out.succeeded.push(item);
          } catch (e) {
            // Undo this item only: the others stay in the transaction.
            tx.workers.delete(id);
            if (mac && tx.devices.get(mac)?.bound_worker_id === id) this.bindings.unbind(tx, mac);
            out.failed.push({ ...item, error: (e as Error).message });
          }
        });
        // Items created and undone in the same transaction leave no trace.
        for (const [k, c] of [...tx.workers.changes]) if (c.orig === undefined && c.next === undefined) tx.workers.changes.delete(k);
        for (const s of out.succeeded) {
          tx.audit('worker.create', { worker_id: s.worker_id, hostname: s.hostname, mac: s.mac, via: 'batch', client });
          if (s.mac) this.auditBind(tx, s.mac, s.worker_id, client);
        }
        tx.audit('worker.create.batch', {
          count,
          name_prefix: prefix,
          succeeded: out.succeeded.length,
          skipped: out.skipped.length,
          failed: out.failed.length,
          client,
        });
      }, client);
      return out;
    });
  }

  async createDisk(rawId: string, dto: CreateDiskDto, client: string): Promise<WorkerDto> {
    return this.project(await this.disks.create(rawId, dto, client));
  }

  async setDiskMode(rawId: string, osTag: string, mode: DiskMode, client: string): Promise<WorkerDto> {
    return this.project(await this.disks.setMode(rawId, osTag, mode, client));
  }

  async rebaseDisk(rawId: string, osTag: string, version: number | undefined, client: string): Promise<WorkerDto> {
    return this.project(await this.disks.rebase(rawId, osTag, version, client));
  }

  async deleteDisk(rawId: string, os: string, q: DeleteDiskQueryDto, client: string): Promise<WorkerDto> {
    return this.project(await this.disks.remove(rawId, os, q.delete_file ?? false, q.ignore_missing_target ?? false, q.os_version, client));
  }

  setMac(rawId: string, mac: string, client: string): Promise<WorkerMacDto> {
    const id = this.parseId(rawId);
    return this.store.exclusive(async () => {
      const { w, changed } = await this.bindings.commit((tx) => {
        const w = tx.workers.get(id);
        if (!w) throw notFound(`worker not found: ${id}`);
        const old = this.bindings.deviceOf(tx, id);
        const changed = old?.mac !== mac;
        if (changed) {
          this.checkPooled(tx, mac);
          if (old) this.bindings.unbind(tx, old.mac);
          this.bindings.bind(tx, mac, id, false);
          this.auditBind(tx, mac, id, client);
          if (old) tx.audit('device.unbind', { mac: old.mac, worker_id: id, reason: `replaced by ${mac}`, client });
        }
        const oldMac = changed ? (old?.mac ?? null) : mac;
        tx.audit('worker.mac.update', { worker_id: id, hostname: w.hostname, old_mac: oldMac, new_mac: mac, mac, changed, client });
        return { w, changed };
      }, client);
      return { ...this.project(w), changed };
    });
  }

  setDefaultOs(rawId: string, dto: DefaultOsDto, client: string): Promise<WorkerDto> {
    const id = this.parseId(rawId);
    if (dto.os === undefined && dto.menu_default === undefined && dto.menu_timeout === undefined) {
      throw badRequest('at least one of os, menu_default, menu_timeout is required');
    }
    return this.store.exclusive(async () => {
      const w = await this.store.commit((tx) => {
        const cur = tx.workers.get(id);
        if (!cur) throw notFound(`worker not found: ${id}`);
        const next: WorkerRecord = { ...cur, boot: { ...cur.boot } };
        if (dto.os !== undefined) {
          next.default_disk = null;
          if (dto.os !== null) {
            if (cur.disks.length === 0) throw conflict(`worker ${id} has no system disk yet; create one before setting os`);
            const same = cur.disks.filter((d) => d.os === dto.os);
            if (!same.length) {
              throw badRequest(
                `os: ${dto.os} is not a system disk of ${id} (disks: ${cur.disks.map((d) => d.os).join(', ')})`,
              );
            }
            if (same.length > 1) {
              throw badRequest(`os: ${id} has ${same.length} ${dto.os} disks (${same.map((d) => `${d.os_version ?? '-'}: ${d.os_tag}`).join(', ')}); choose one with PUT /workers/${id}/default-disk`);
            }
            next.default_disk = same[0].os_tag ?? null;
          }
          next.default_os = dto.os;
        }
        if (dto.menu_default !== undefined) next.boot.menu_default = dto.menu_default;
        if (dto.menu_timeout !== undefined) next.boot.menu_timeout = dto.menu_timeout;
        tx.workers.set(id, next);
        const changes: Record<string, unknown> = {};
        for (const k of ['os', 'menu_default', 'menu_timeout'] as const) if (dto[k] !== undefined) changes[k] = dto[k];
        tx.audit('worker.default_os', { worker_id: id, ...changes, client });
        return next;
      });
      return this.project(w);
    });
  }

  /** PUT default-disk (seed 004): the disk by os_tag; default_os follows it (one field underneath). */
  setDefaultDisk(rawId: string, osTag: string | null, client: string): Promise<WorkerDto> {
    const id = this.parseId(rawId);
    return this.store.exclusive(async () => {
      const w = await this.store.commit((tx) => {
        const cur = tx.workers.get(id);
        if (!cur) throw notFound(`worker not found: ${id}`);
        const disk = osTag === null ? null : cur.disks.find((d) => d.os_tag === osTag);
        if (osTag !== null && !disk) {
          throw badRequest(`os_tag: ${osTag} is not a disk of ${id} (disks: ${cur.disks.map((d) => `${d.os}${d.os_version ? ` ${d.os_version}` : ''}: ${d.os_tag}`).join(', ') || 'none'})`);
        }
        const next: WorkerRecord = { ...cur, default_disk: disk?.os_tag ?? null, default_os: disk?.os ?? null };
        tx.workers.set(id, next);
        tx.audit('worker.default_disk', { worker_id: id, os_tag: osTag, os: next.default_os, client });
        return next;
      });
      return this.project(w);
    });
  }

  remove(rawId: string, deleteDisk: boolean, ignoreMissing: boolean, client: string): Promise<DeleteWorkerResultDto> {
    const id = this.parseId(rawId);
    return this.disks.forWorker(id, () => this.removeLocked(id, deleteDisk, ignoreMissing, client));
  }

  private async removeLocked(id: string, deleteDisk: boolean, ignoreMissing: boolean, client: string): Promise<DeleteWorkerResultDto> {
    const w = this.store.read().workers.get(id);
    if (!w) throw notFound(`worker not found: ${id}`);
    await this.deleteTargets(w, deleteDisk, ignoreMissing, client);
    try {
      return await this.deleteCommitted(id, deleteDisk, client);
    } finally {
      // Its credential goes and its host leaves the agents (the reconciler finishes what fails).
      if (!this.store.read().workers.has(id)) await this.credentials.workerDeleted(id, client);
    }
  }

  private deleteCommitted(id: string, deleteDisk: boolean, client: string): Promise<DeleteWorkerResultDto> {
    return this.store.exclusive(async () => {
      const result = await this.bindings.commit((tx) => {
        if (!tx.workers.get(id)) throw notFound(`worker not found: ${id}`);
        const r = this.deleteInTx(tx, id);
        for (const [op, f] of r.audits) tx.audit(op, { ...f, delete_disk: deleteDisk, client });
        return r;
      }, client);
      return { deleted: id, delete_disk: deleteDisk, dnsmasq_removed: result.unbound > 0 };
    });
  }

  async removeBatch(dto: DeleteWorkersBatchDto, client: string): Promise<DeleteWorkersBatchResultDto> {
    const out: DeleteWorkersBatchResultDto = { succeeded: [], failed: [] };
    // Targets first, worker by worker; then one ledger commit and one dnsmasq reload for all.
    const ready: string[] = [];
    for (const raw of dto.worker_ids) {
      const id = normalizeId(raw);
      const w = id ? this.store.read().workers.get(id) : undefined;
      if (!id || !w) {
        out.failed.push({ worker_id: raw, error: `worker not found: ${raw}` });
        continue;
      }
      try {
        await this.disks.forWorker(id, () => this.deleteTargets(this.store.read().workers.get(id) ?? w, dto.delete_disk ?? false, dto.ignore_missing_target ?? false, client));
        ready.push(id);
      } catch (e) {
        out.failed.push({ worker_id: id, error: (e as Error).message });
      }
    }
    try {
      return await this.deleteBatchCommitted(dto, ready, out, client);
    } finally {
      await Promise.all(out.succeeded.map((s) => this.credentials.workerDeleted(s.worker_id, client)));
    }
  }

  private deleteBatchCommitted(dto: DeleteWorkersBatchDto, ready: string[], out: DeleteWorkersBatchResultDto, client: string): Promise<DeleteWorkersBatchResultDto> {
    return this.store.exclusive(async () => {
      await this.bindings.commit((tx) => {
        for (const id of ready) {
          const w = tx.workers.get(id);
          if (!w) {
            out.failed.push({ worker_id: id, error: `worker not found: ${id}` });
            continue;
          }
          // A disk created after its targets were deleted would be orphaned: leave that worker.
          if (w.disks.length || w.cd) {
            out.failed.push({ worker_id: id, error: `worker ${id} got a disk during deletion; retry` });
            continue;
          }
          for (const [op, f] of this.deleteInTx(tx, id).audits) tx.audit(op, { ...f, delete_disk: dto.delete_disk ?? false, client });
          out.succeeded.push({ worker_id: id, hostname: w.hostname });
        }
        tx.audit('worker.delete.batch', { succeeded: out.succeeded.length, failed: out.failed.length, client });
      }, client);
      return out;
    });
  }

  /**
   * The CD target first, then the disks. Each target the agents removed leaves the ledger at once,
   * so a failure half-way never leaves a ledger disk without its target.
   */
  private async deleteTargets(w: WorkerRecord, deleteDisk: boolean, ignoreMissing: boolean, client: string): Promise<void> {
    const forget = (fn: (cur: WorkerRecord) => WorkerRecord) =>
      this.store.exclusive(() =>
        this.store.commit((tx) => {
          const cur = tx.workers.get(w.worker_id);
          if (cur) tx.workers.set(w.worker_id, fn(cur));
        }),
      );
    if (w.cd) {
      await this.disks.deleteTarget(w.cd, false, ignoreMissing, w.worker_id, client);
      await forget((cur) => ({ ...cur, cd: null, state: workerState({ ...cur, cd: null }) }));
    }
    for (const d of w.disks) {
      await this.disks.deleteTarget(d, deleteDisk, ignoreMissing, w.worker_id, client);
      await forget((cur) => {
        const disks = withoutTarget(cur.disks, d);
        return { ...cur, disks, state: workerState({ cd: cur.cd, disks }) };
      });
    }
  }

  /** Unbinds the worker's device(s) back to the pool, then drops the worker. Returns audit records. */
  private deleteInTx(tx: Tx, id: string): { audits: AuditCall[]; unbound: number } {
    const w = tx.workers.get(id)!;
    const audits: AuditCall[] = [['worker.delete', { worker_id: id, hostname: w.hostname }]];
    let unbound = 0;
    for (let d = this.bindings.deviceOf(tx, id); d; d = this.bindings.deviceOf(tx, id)) {
      this.bindings.unbind(tx, d.mac);
      audits.push(['device.unbind', { mac: d.mac, worker_id: id, reason: 'worker deleted' }]);
      unbound++;
    }
    tx.workers.delete(id);
    return { audits, unbound };
  }

  private createInTx(tx: Tx, id: string, hostname: string | undefined, arch: string | undefined, boot?: BootConfigDto, cd: CdRecord | null = null): WorkerRecord {
    if (tx.workers.has(id)) throw conflict(`worker already exists: ${id}`);
    const host = hostname ?? id;
    this.checkHostnameFree(tx, host, id);
    const w = newWorker(id, {
      hostname: host,
      arch: arch ?? 'x86_64',
      state: cd ? 'installing' : 'registered',
      cd,
      boot: { menu_default: boot?.menu_default ?? null, menu_timeout: boot?.menu_timeout ?? null },
      created_at: this.clock.isoNow(),
      incarnation: randomBytes(8).toString('hex'),
    });
    tx.workers.set(id, w);
    return w;
  }

  /** Which worker answers to this name in /boot-vars (as worker_id or hostname), as tx sees it. */
  private nameOwner(tx: Tx, name: string): string | undefined {
    if (tx.workers.has(name)) return name;
    for (const c of tx.workers.changes.values()) if (c.next?.hostname === name) return c.next.worker_id;
    const id = this.store.workerIdByHostname().get(name);
    return id && tx.workers.get(id)?.hostname === name ? id : undefined;
  }

  /** Hostnames and worker ids share one namespace, so a hostname lookup is never ambiguous. */
  private checkHostnameFree(tx: Tx, host: string, selfId: string): void {
    const a = this.nameOwner(tx, host);
    if (a && a !== selfId) throw conflict(`hostname already exists: ${host}`);
    const b = this.nameOwner(tx, selfId);
    if (b && b !== selfId) throw conflict(`worker_id ${selfId} is already the hostname of ${b}`);
  }

  /** POST /workers and PUT mac: the device must be in the pool and free. */
  private checkPooled(tx: Tx, mac: string): void {
    const d = tx.devices.get(mac);
    if (!d) throw conflict(`device not in pool: ${mac} (register it first: POST /devices)`);
    if (d.state === 'revoked') throw conflict(`device revoked: ${mac}`);
    if (d.bound_worker_id) throw conflict(`device already bound to ${d.bound_worker_id}: ${mac}`);
  }

  private auditBind(tx: Tx, mac: string, workerId: string, client: string): void {
    tx.audit('device.bind', { mac, worker_id: workerId, old_worker_id: null, old_device_mac: null, client });
  }

  private find(rawId: string): WorkerRecord {
    const id = this.parseId(rawId);
    const w = this.store.read().workers.get(id);
    if (!w) throw notFound(`worker not found: ${id}`);
    return w;
  }

  private parseId(raw: string): string {
    const id = normalizeId(raw);
    if (!id) throw badRequest(`worker_id: invalid worker id ${JSON.stringify(raw)}`);
    return id;
  }
}
