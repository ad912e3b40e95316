import { Injectable, OnModuleInit } from '@nestjs/common';
import { createHash } from 'node:crypto';
import { badRequest, conflict, notFound } from '../../shared/http/api-error';
import { checkVersionRef } from '../../shared/master-version-ref';
import type { TxAudit } from '../audit/audit.service';
import { BootSessionsService } from '../boots/boot-sessions.service';
import { Clock } from '../common/clock';
import { DiskRecord, WorkerRecord } from '../repositories/ledger/records';
import { LedgerRepository } from '../repositories/ledger/ledger.repository';
import { RolloutState, SettingsRepository } from '../repositories/settings/settings.repository';
import type { RolloutDiskDto, RolloutDto, StartRolloutDto } from './dto/rollout.dto';
import { MastersService } from './masters.service';

/**
 * Staged rollout of a master version (issue 26): the disks of the canary workers first, then all.
 * A `reset` disk takes its target version at its next boot (DiskResetService asks `targetOf`); a
 * `persistent` one only when the operator rebases it. Rollback is a rollout to the version before,
 * with the same stages. The state lives in the settings document (`master_rollouts`), so every
 * control plane sees it and a store export carries it.
 */
@Injectable()
export class RolloutsService implements OnModuleInit {
  private rollouts: Record<string, RolloutState> = {};

  constructor(
    private readonly repo: SettingsRepository,
    private readonly store: LedgerRepository,
    private readonly masters: MastersService,
    private readonly sessions: BootSessionsService,
    private readonly clock: Clock,
  ) {}

  async onModuleInit(): Promise<void> {
    this.masters.addInUseCheck((name, version) => {
      const r = this.rollouts[name];
      if (r?.version === version) return `the rollout of ${name} (its target)`;
      if (r?.previous === version) return `the rollout of ${name} (the version a rollback returns to)`;
      return null;
    });
    this.repo.onChange((doc) => (this.rollouts = doc.master_rollouts ?? {}));
    this.rollouts = (await this.repo.load()).master_rollouts ?? {};
  }

  /**
   * The version a disk is to hold now: its rollout's version when the rollout has reached the
   * disk's worker, else the version it holds (undefined: a disk made before versions).
   */
  targetOf(workerId: string, d: DiskRecord): number | undefined {
    if (d.source.type !== 'master') return undefined;
    if (d.maintenance) return d.source.version;
    const r = this.rollouts[d.source.name];
    if (r && (r.phase === 'all' || r.canary.includes(workerId))) return r.version;
    // A disk made before versions, not reached yet, stays on the version the fleet was on (the
    // agent's latest could already be the canary's).
    return d.source.version ?? (r?.previous ?? undefined);
  }

  /** The version a new disk of this master gets when none is asked for: the fleet's (undefined: the agent's latest). */
  defaultVersion(master: string): number | undefined {
    const r = this.rollouts[master];
    if (!r) return undefined;
    return r.phase === 'all' ? r.version : (r.previous ?? undefined);
  }

  /** POST /masters/{name}/rollout. */
  async start(rawName: string, dto: StartRolloutDto, client: string): Promise<RolloutDto> {
    const [name, version] = checkVersionRef(rawName, dto.version);
    return this.begin(name, version, dto, false, client);
  }

  /** POST /masters/{name}/rollout/rollback: a rollout to the version before, canary first if asked. */
  async rollback(rawName: string, dto: Omit<StartRolloutDto, 'version'>, client: string): Promise<RolloutDto> {
    const [name] = checkVersionRef(rawName, 1);
    const r = this.rollouts[name];
    if (!r) throw notFound(`no rollout of ${name}: nothing to roll back`);
    if (r.previous === null) throw conflict(`the rollout of ${name} to version ${r.version} has no version before it to roll back to`);
    return this.begin(name, r.previous, dto, true, client);
  }

  /** POST /masters/{name}/rollout/promote: from the canary workers to every disk of the master. */
  async promote(rawName: string, client: string): Promise<RolloutDto> {
    const [name] = checkVersionRef(rawName, 1);
    return this.store.exclusive(async () => {
      const r = this.rollouts[name];
      if (!r) throw notFound(`no rollout of ${name}`);
      if (r.phase === 'all') throw conflict(`the rollout of ${name} to version ${r.version} already covers every disk`);
      await this.save(name, { ...r, phase: 'all', promoted_at: this.clock.isoNow() }, { op: 'master.rollout.promote', fields: { name, version: r.version, client } });
      return this.view(name);
    });
  }

  /** GET /masters/{name}/rollout. */
  get(rawName: string): RolloutDto {
    const [name] = checkVersionRef(rawName, 1);
    if (!this.rollouts[name]) throw notFound(`no rollout of ${name}`);
    return this.view(name);
  }

  // ---- internals ----

  private async begin(name: string, version: number, dto: Omit<StartRolloutDto, 'version'>, rollback: boolean, client: string): Promise<RolloutDto> {
    if (dto.canary_workers?.length && dto.canary_percent !== undefined) throw badRequest('canary_workers: give the canary as workers or as a percentage, not both');
    const disks = this.disksOf(name);
    if (!disks.length) throw conflict(`no disk was cloned from ${name}: nothing to roll out`);
    // The version must be there, the same bytes, on every agent that has disks of this master.
    const catalog = (await this.masters.list(client)).catalog.find((m) => m.name === name);
    const v = catalog?.versions.find((x) => x.version === version);
    if (!v) throw notFound(`version not found: no enabled disk agent holds version ${version} of ${name}`);
    if (v.conflicting_agents?.length) throw conflict(`version ${version} of ${name} is other bytes on ${v.conflicting_agents.join(', ')} than on ${v.agents.join(', ')}; resolve that first`);
    const missing = [...new Set(disks.map((x) => x.disk.agent))].filter((a) => !v.agents.includes(a)).sort();
    if (missing.length) throw conflict(`version ${version} of ${name} is not on ${missing.join(', ')}, where disks of it are; distribute it first (POST /masters/${encodeURIComponent(name)}/versions/${version}/distribute); nothing was started`);
    const workers = [...new Set(disks.map((x) => x.worker.worker_id))].sort();
    let canary: string[] = [];
    if (dto.canary_workers?.length) {
      const unknown = dto.canary_workers.filter((w) => !workers.includes(w));
      if (unknown.length) throw badRequest(`canary_workers: ${unknown.join(', ')} ha${unknown.length > 1 ? 've' : 's'} no disk of ${name}`);
      canary = [...new Set(dto.canary_workers)].sort();
    } else if (dto.canary_percent !== undefined) {
      // A spread that does not depend on names' order, fixed when the rollout starts.
      const n = Math.max(1, Math.ceil((workers.length * dto.canary_percent) / 100));
      const rank = (w: string) => createHash('sha256').update(`${name}\n${version}\n${w}`).digest('hex');
      canary = [...workers].sort((a, b) => (rank(a) < rank(b) ? -1 : 1)).slice(0, n).sort();
    }
    return this.store.exclusive(async () => {
      const cur = this.rollouts[name];
      const previous = cur ? cur.version : this.fleetVersion(disks.map((x) => x.disk));
      if (previous === version && cur?.phase === 'all') throw conflict(`every disk of ${name} is already to hold version ${version}`);
      const phase = canary.length ? 'canary' : 'all';
      const next: RolloutState = { version, previous: previous ?? null, canary, phase, rollback, started_at: this.clock.isoNow(), ...(phase === 'all' ? { promoted_at: this.clock.isoNow() } : {}) };
      await this.save(name, next, { op: rollback ? 'master.rollback' : 'master.rollout', fields: { name, version, previous: next.previous, phase, canary, client } });
      return this.view(name);
    });
  }

  /** Writes the rollout with its audit entry (one commit). */
  private async save(name: string, r: RolloutState, audit: TxAudit): Promise<void> {
    const next = { ...this.rollouts, [name]: r };
    const doc = await this.repo.save(['master_rollouts'], { master_rollouts: next }, [audit]);
    this.rollouts = doc.master_rollouts ?? {};
  }

  private disksOf(name: string): { worker: WorkerRecord; disk: DiskRecord }[] {
    const out: { worker: WorkerRecord; disk: DiskRecord }[] = [];
    // The maintenance disk is the writer of the next version, not one of the disks a rollout moves.
    for (const w of this.store.read().workers.values()) for (const d of w.disks) if (d.source.type === 'master' && d.source.name === name && !d.maintenance) out.push({ worker: w, disk: d });
    return out;
  }

  /** The version most disks of the master hold (what a rollout moves away from). */
  private fleetVersion(disks: DiskRecord[]): number | undefined {
    const count = new Map<number, number>();
    for (const d of disks) if (d.source.type === 'master' && d.source.version) count.set(d.source.version, (count.get(d.source.version) ?? 0) + 1);
    return [...count].sort((a, b) => b[1] - a[1] || b[0] - a[0])[0]?.[0];
  }

  private view(name: string): RolloutDto {
    const r = this.rollouts[name];
    const macOf = new Map<string, string>();
    for (const dev of this.store.read().devices.values()) if (dev.bound_worker_id) macOf.set(dev.bound_worker_id, dev.mac);
    const items: RolloutDiskDto[] = this.disksOf(name)
      .map(({ worker, disk }) => {
        const selected = r.phase === 'all' || r.canary.includes(worker.worker_id);
        const target = this.targetOf(worker.worker_id, disk);
        const version = disk.source.type === 'master' ? (disk.source.version ?? null) : null;
        // Boots since the rollout reached this worker: its last one, if it came after.
        const since = Date.parse((r.canary.includes(worker.worker_id) ? r.started_at : r.promoted_at) ?? '') || Infinity;
        const mac = macOf.get(worker.worker_id);
        const last = mac ? this.sessions.latest(mac) : null;
        const boot = last && last.session.started >= since ? { started_at: new Date(last.session.started).toISOString(), outcome: last.outcome } : null;
        const state: RolloutDiskDto['state'] = !selected ? 'not_reached' : version === target ? 'on_target' : disk.mode === 'reset' ? 'at_next_boot' : 'needs_rebase';
        return { worker_id: worker.worker_id, os: disk.os, os_tag: disk.os_tag ?? null, agent: disk.agent, mode: disk.mode ?? 'persistent', version, target: target ?? null, canary: r.canary.includes(worker.worker_id), state, boot_since: boot };
      })
      .sort((a, b) => (a.worker_id < b.worker_id ? -1 : a.worker_id > b.worker_id ? 1 : a.os < b.os ? -1 : 1));
    const byVersion = new Map<string, number>();
    for (const i of items) byVersion.set(String(i.version ?? 'none'), (byVersion.get(String(i.version ?? 'none')) ?? 0) + 1);
    const count = (f: (i: RolloutDiskDto) => boolean) => items.filter(f).length;
    return {
      name,
      version: r.version,
      previous: r.previous,
      phase: r.phase,
      rollback: r.rollback,
      canary: r.canary,
      started_at: r.started_at,
      promoted_at: r.promoted_at ?? null,
      summary: {
        disks: items.length,
        on_target: count((i) => i.state === 'on_target'),
        at_next_boot: count((i) => i.state === 'at_next_boot'),
        needs_rebase: count((i) => i.state === 'needs_rebase'),
        not_reached: count((i) => i.state === 'not_reached'),
        booted: count((i) => i.boot_since?.outcome === 'booted'),
        failed: count((i) => i.boot_since?.outcome === 'failed' || i.boot_since?.outcome === 'stuck'),
        by_version: [...byVersion].map(([version, disks]) => ({ version: version === 'none' ? null : Number(version), disks })).sort((a, b) => (a.version ?? 0) - (b.version ?? 0)),
      },
      disks: items,
    };
  }
}
