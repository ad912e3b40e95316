import { Injectable } from '@nestjs/common';
import { ApiError, conflict, notFound } from '../../shared/http/api-error';
import { checkVersionRef } from '../../shared/master-version-ref';
import type { MasterDto, MasterVersionDto } from '../../shared/agent-contract/luns.dto';
import { AuditService } from '../audit/audit.service';
import { LedgerRepository } from '../repositories/ledger/ledger.repository';
import { StorageNodeRegistry } from '../storage-nodes/storage-node-registry';
import { StorageNodesService } from '../storage-nodes/storage-nodes.service';
import type { AgentMastersDto, DeletedMasterVersionOutDto, MasterCatalogDto, MasterOutDto, MastersDto, MasterVersionCatalogDto } from './dto/masters.dto';

/** Masters and their versions over the fleet: the seed's per-agent list, a catalog per master, deletion and notes. */
@Injectable()
export class MastersService {
  /** Other holders of versions (rollouts): each names why a version cannot go, or null. */
  private readonly inUseChecks: ((name: string, version: number) => string | null)[] = [];

  constructor(
    private readonly registry: StorageNodeRegistry,
    private readonly storageNodes: StorageNodesService,
    private readonly store: LedgerRepository,
    private readonly audit: AuditService,
  ) {}

  /** A version a check names a reason for is not deleted (RolloutsService registers one). */
  addInUseCheck(fn: (name: string, version: number) => string | null): void {
    this.inUseChecks.push(fn);
  }

  /** GET /masters: every enabled disk-role agent in parallel; failures per agent, 502 if all fail. */
  async list(client: string): Promise<MastersDto> {
    const out = await this.survey();
    for (const r of out.agents) if (r.error) await this.audit.record('master.list', { status: 'failed', agent: r.agent, error: r.error, client });
    if (out.agents.length && out.agents.every((r) => r.error)) throw new ApiError(502, `every agent failed: ${out.agents.map((r) => `${r.agent}: ${r.error}`).join('; ')}`);
    return out;
  }

  /** Every enabled disk-role agent's masters (an agent that cannot be asked has `error`), and the catalog over them. */
  async survey(): Promise<MastersDto> {
    const agents = this.registry.all().filter((a) => a.enabled && a.role.disk);
    const rows: AgentMastersDto[] = await Promise.all(
      agents.map(async (a) => {
        try {
          const masters = (await this.storageNodes.mastersOf(a)).map(outMaster);
          return { agent: a.id, iscsi_server: this.storageNodes.dataAddress(a), masters };
        } catch (e) {
          return { agent: a.id, iscsi_server: this.storageNodes.dataAddress(a), masters: [], error: (e as Error).message };
        }
      }),
    );
    return { agents: rows, catalog: this.catalog(rows) };
  }

  /**
   * DELETE /masters/{name}/versions/{version}: refused while a disk in the ledger holds the
   * version; then deleted on every agent holding it. An agent may still refuse (a disk the ledger
   * does not know, or its `_tpl_` file is this version): the answer names what happened where.
   */
  async deleteVersion(rawName: string, rawVersion: string, client: string): Promise<DeletedMasterVersionOutDto> {
    const [name, version] = checkVersionRef(rawName, rawVersion);
    const held = this.inUseChecks.map((f) => f(name, version)).find((x) => x);
    if (held) {
      await this.audit.record('master.version.delete', { status: 'failed', name, version, error: held, client });
      throw conflict(`version ${version} of ${name} is in use by ${held}; nothing was deleted`);
    }
    const users = this.disksOn(name, version);
    if (users.length) {
      await this.audit.record('master.version.delete', { status: 'failed', name, version, error: 'in use', client });
      throw conflict(`version ${version} of ${name} is in use by ${users.length} disk(s) (${users.slice(0, 5).join(', ')}${users.length > 5 ? ', ...' : ''}); nothing was deleted`);
    }
    const copying = await this.copyingTo(name, version);
    if (copying.length) {
      await this.audit.record('master.version.delete', { status: 'failed', name, version, error: 'being copied', client });
      throw conflict(`version ${version} of ${name} is being copied to ${copying.join(', ')} (GET /masters/${encodeURIComponent(name)}/versions/${version}/distribution); nothing was deleted`);
    }
    const holders = await this.holders(name, version);
    const deleted: string[] = [];
    const failed: string[] = [];
    for (const a of holders) {
      try {
        await this.storageNodes.deleteMasterVersion(a, name, version);
        deleted.push(a.id);
      } catch (e) {
        failed.push(`${a.id}: ${(e as Error).message}`);
      }
    }
    await this.audit.record('master.version.delete', { ...(failed.length ? { status: 'failed', error: failed.join('; ') } : {}), name, version, deleted_on: deleted, client });
    if (failed.length) {
      throw conflict(`version ${version} of ${name}: ${deleted.length ? `deleted on ${deleted.join(', ')}; ` : 'nothing was deleted; '}refused on ${failed.join('; ')}`);
    }
    return { name, version, deleted_on: deleted };
  }

  /** PUT /masters/{name}/versions/{version}/note: the same note on every agent holding the version. */
  async setNote(rawName: string, rawVersion: string, note: string, client: string): Promise<MasterVersionDto> {
    const [name, version] = checkVersionRef(rawName, rawVersion);
    const holders = await this.holders(name, version);
    let out: MasterVersionDto | null = null;
    const failed: string[] = [];
    for (const a of holders) {
      try {
        out = await this.storageNodes.setMasterVersionNote(a, name, version, note);
      } catch (e) {
        failed.push(`${a.id}: ${(e as Error).message}`);
      }
    }
    await this.audit.record('master.version.note', { ...(failed.length ? { status: 'failed', error: failed.join('; ') } : {}), name, version, agents: holders.map((a) => a.id), client });
    if (!out) throw new ApiError(502, `no agent took the note: ${failed.join('; ')}`);
    return out;
  }

  // ---- internals ----

  /** Enabled disk agents holding the version (404 when none does; an agent that cannot be asked is a 502). */
  private async holders(name: string, version: number) {
    const agents = this.registry.all().filter((a) => a.enabled && a.role.disk);
    const found = await Promise.all(
      agents.map(async (a) => {
        try {
          const m = (await this.storageNodes.mastersOf(a)).find((x) => x.name === name);
          return m?.versions?.some((v) => v.version === version) ? a : null;
        } catch (e) {
          throw new ApiError(502, `agent ${a.id} could not be asked which versions it holds: ${(e as Error).message}; nothing was changed`);
        }
      }),
    );
    const holders = found.filter((a): a is NonNullable<typeof a> => a !== null);
    if (!holders.length) throw notFound(`version not found: no enabled disk agent holds version ${version} of ${name}`);
    return holders;
  }

  /** Agents pulling the version now (a delete would cut their transfer half-way). An agent that cannot be asked pulls nothing. */
  private async copyingTo(name: string, version: number): Promise<string[]> {
    const agents = this.registry.all().filter((a) => a.enabled && a.role.disk);
    const busy = await Promise.all(
      agents.map(async (a) => ((await this.storageNodes.masterTransferOf(a, name, version))?.state === 'running' ? a.id : null)),
    );
    return busy.filter((x): x is string => x !== null).sort();
  }

  /** `<worker>/<os>` of every ledger disk holding the version. */
  private disksOn(name: string, version: number): string[] {
    const out: string[] = [];
    for (const w of this.store.read().workers.values()) {
      for (const d of w.disks) if (d.source.type === 'master' && d.source.name === name && d.source.version === version) out.push(`${w.worker_id}/${d.os}`);
    }
    return out;
  }

  private catalog(rows: AgentMastersDto[]): MasterCatalogDto[] {
    const byName = new Map<string, Map<number, { v: MasterVersionCatalogDto; sha: Map<string, string[]> }>>();
    for (const r of rows) {
      for (const m of r.masters) {
        const versions = byName.get(m.name) ?? new Map();
        byName.set(m.name, versions);
        for (const v of m.versions) {
          const cur = versions.get(v.version) ?? { v: { version: v.version, size: v.size, allocated: v.allocated, sha256: v.sha256, created: v.created, note: v.note, origin: v.origin, agents: [], disks: 0 }, sha: new Map() };
          versions.set(v.version, cur);
          cur.sha.set(v.sha256, [...(cur.sha.get(v.sha256) ?? []), r.agent]);
        }
      }
    }
    const disks = new Map<string, number>();
    for (const w of this.store.read().workers.values()) {
      for (const d of w.disks) if (d.source.type === 'master') disks.set(`${d.source.name}\n${d.source.version ?? ''}`, (disks.get(`${d.source.name}\n${d.source.version ?? ''}`) ?? 0) + 1);
    }
    return [...byName]
      .sort(([a], [b]) => (a < b ? -1 : 1))
      .map(([name, versions]) => {
        const list = [...versions.values()]
          .sort((a, b) => a.v.version - b.v.version)
          .map(({ v, sha }) => {
            // The bytes most agents hold under this number are the version; the others conflict.
            const [[major, agents], ...rest] = [...sha].sort((a, b) => b[1].length - a[1].length || (a[0] < b[0] ? -1 : 1));
            return { ...v, sha256: major, agents: agents.sort(), ...(rest.length ? { conflicting_agents: rest.flatMap(([, x]) => x).sort() } : {}), disks: disks.get(`${name}\n${v.version}`) ?? 0 };
          });
        return { name, latest: list.length ? list[list.length - 1].version : null, versions: list, unversioned_disks: disks.get(`${name}\n`) ?? 0 };
      });
  }
}

/** An agent's master as the control plane answers it (an agent older than versions reports none). */
function outMaster(m: MasterDto): MasterOutDto {
  return { name: m.name, size: m.size, mtime: m.mtime, latest: m.latest ?? null, versions: m.versions ?? [] };
}
