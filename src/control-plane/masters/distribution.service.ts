import { Injectable } from '@nestjs/common';
import { notFound } from '../../shared/http/api-error';
import { checkVersionRef } from '../../shared/master-version-ref';
import type { MasterTransferDto } from '../../shared/agent-contract/transfers.dto';
import { AuditService } from '../audit/audit.service';
import { LedgerRepository } from '../repositories/ledger/ledger.repository';
import type { AgentRecord } from '../storage-nodes/storage-node-registry';
import { StorageNodesService } from '../storage-nodes/storage-nodes.service';
import type { MastersDto, VersionDistributionAgentDto, VersionDistributionDto } from './dto/masters.dto';
import { MastersService } from './masters.service';

/**
 * A version reaches every agent that holds its master: each agent without it pulls it from one
 * that has it (agent to agent, with a read ticket for that version signed with the sender's
 * token). The agents do the copying, resumable and checksummed; this service asks and reports.
 */
@Injectable()
export class DistributionService {
  constructor(
    private readonly masters: MastersService,
    private readonly storageNodes: StorageNodesService,
    private readonly store: LedgerRepository,
    private readonly audit: AuditService,
  ) {}

  /** GET /masters/{name}/versions/{version}/distribution. */
  async distribution(rawName: string, rawVersion: string): Promise<VersionDistributionDto> {
    const [name, version] = checkVersionRef(rawName, rawVersion);
    const plan = await this.plan(name, version);
    const agents = await Promise.all(
      plan.rows.map(async (row): Promise<VersionDistributionAgentDto> => {
        if (row.state !== 'missing') return row;
        const t = await this.storageNodes.masterTransferOf(this.storageNodes.find(row.agent), name, version);
        return t ? fromTransfer(row.agent, t) : row;
      }),
    );
    return this.view(plan, agents);
  }

  /**
   * POST /masters/{name}/versions/{version}/distribute: every agent holding the master but not
   * the version is asked to pull it (sources taken in turn among the holders). Asking again
   * resumes interrupted transfers and retries failed ones; a transfer under way is left as it is.
   */
  async distribute(rawName: string, rawVersion: string, client: string): Promise<VersionDistributionDto> {
    const [name, version] = checkVersionRef(rawName, rawVersion);
    const plan = await this.plan(name, version);
    let turn = 0;
    const agents = await Promise.all(
      plan.rows.map(async (row): Promise<VersionDistributionAgentDto> => {
        if (row.state !== 'missing') return row;
        const from = plan.holders[turn++ % plan.holders.length];
        try {
          return fromTransfer(row.agent, await this.storageNodes.startMasterTransfer(this.storageNodes.find(row.agent), from, name, version), from.id);
        } catch (e) {
          return { agent: row.agent, state: 'failed', source: from.id, error: (e as Error).message };
        }
      }),
    );
    const out = this.view(plan, agents);
    const asked = agents.filter((a) => a.source).map((a) => `${a.agent}<-${a.source}`);
    const failed = agents.filter((a) => a.state === 'failed');
    await this.audit.record('master.version.distribute', {
      ...(failed.length ? { status: 'failed', error: failed.map((a) => `${a.agent}: ${a.error}`).join('; ') } : {}),
      name,
      version,
      transfers: asked,
      client,
    });
    return out;
  }

  // ---- internals ----

  /** Who holds the version (the catalog's bytes), who holds other bytes under it, and who lacks it. */
  private async plan(name: string, version: number) {
    const survey: MastersDto = await this.masters.survey();
    const entry = survey.catalog.find((m) => m.name === name)?.versions.find((v) => v.version === version);
    if (!entry) throw notFound(`version not found: no enabled disk agent holds version ${version} of ${name}`);
    const withDisks = new Set<string>();
    for (const w of this.store.read().workers.values()) for (const d of w.disks) if (d.source.type === 'master' && d.source.name === name) withDisks.add(d.agent);
    const rows: VersionDistributionAgentDto[] = [];
    for (const r of survey.agents) {
      const holdsMaster = r.masters.some((m) => m.name === name);
      if (!holdsMaster && !withDisks.has(r.agent)) continue;
      if (r.error) rows.push({ agent: r.agent, state: 'unreachable', error: r.error });
      else if (entry.agents.includes(r.agent)) rows.push({ agent: r.agent, state: 'present' });
      else if (entry.conflicting_agents?.includes(r.agent)) rows.push({ agent: r.agent, state: 'conflict', error: `holds other bytes under version ${version}` });
      else rows.push({ agent: r.agent, state: 'missing' });
    }
    const holders: AgentRecord[] = entry.agents.map((id) => this.storageNodes.find(id));
    return { name, version, sha256: entry.sha256, size: entry.size, rows, holders };
  }

  private view(plan: { name: string; version: number; sha256: string; size: number }, agents: VersionDistributionAgentDto[]): VersionDistributionDto {
    return { name: plan.name, version: plan.version, sha256: plan.sha256, size: plan.size, agents, complete: agents.every((a) => a.state === 'present') };
  }
}

/** An agent's transfer as the distribution shows it (done: the version is there now). */
function fromTransfer(agent: string, t: MasterTransferDto, sourceId?: string): VersionDistributionAgentDto {
  return {
    agent,
    state: t.state === 'done' ? 'present' : t.state,
    ...(sourceId ? { source: sourceId } : {}),
    data_bytes: t.data_bytes,
    bytes_done: t.bytes_done,
    ...(t.error ? { error: t.error } : {}),
  };
}
