import { Injectable } from '@nestjs/common';
import { AgentRegistry } from '../agents/agent-registry';
import { AgentsService } from '../agents/agents.service';
import { DiskRecord, targetName, WorkerRecord } from '../store/records';

export interface DiskVars {
  base_iqn: string;
  iscsi_server?: string;
  iscsi_sep?: string;
}

/**
 * The default boot disk of a worker (default_os, else the first disk) and the connection
 * variables /boot-vars derives from it. base_iqn comes from the disk's IQN; the data-plane
 * address and separator come from the disk's agent (AgentsModule overrides `agentVars`).
 */
@Injectable()
export class DiskVarsResolver {
  constructor(
    private readonly registry: AgentRegistry,
    private readonly agents: AgentsService,
  ) {}

  defaultDisk(w: WorkerRecord): DiskRecord | undefined {
    if (!w.disks.length) return undefined;
    return (w.default_os && w.disks.find((d) => d.os === w.default_os)) || w.disks[0];
  }

  resolve(w: WorkerRecord): DiskVars | null {
    const disk = this.defaultDisk(w);
    if (!disk) return null;
    const name = targetName(disk);
    const base_iqn = name.slice(0, name.lastIndexOf(':'));
    return { base_iqn, ...this.agentVars(disk) };
  }

  /**
   * iscsi_server: the agent's iscsi_server, else the host of its base_url. iscsi_sep: the
   * agent's lio/stgt tag, else its cached capabilities.backend, else stgt. No network here:
   * this runs on every boot.
   */
  private agentVars(disk: DiskRecord): Omit<DiskVars, 'base_iqn'> {
    const a = this.registry.get(disk.agent);
    if (!a) return {};
    const backend = a.tags.includes('lio') ? 'lio' : a.tags.includes('stgt') ? 'stgt' : this.agents.cachedCapabilities(a.id)?.backend;
    return { iscsi_server: this.agents.dataAddress(a), iscsi_sep: backend === 'lio' ? '::::' : ':::1:' };
  }
}
