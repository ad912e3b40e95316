import { Injectable } from '@nestjs/common';
import type { DiskRecord, WorkerRecord } from '../store/records';

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
  defaultDisk(w: WorkerRecord): DiskRecord | undefined {
    if (!w.disks.length) return undefined;
    return (w.default_os && w.disks.find((d) => d.os === w.default_os)) || w.disks[0];
  }

  resolve(w: WorkerRecord): DiskVars | null {
    const disk = this.defaultDisk(w);
    if (!disk?.iqn) return null;
    const base_iqn = disk.iqn.slice(0, disk.iqn.lastIndexOf(':'));
    return { base_iqn, ...this.agentVars(disk) };
  }

  /** iscsi_server / iscsi_sep of the disk's agent; none known without the agent registry. */
  protected agentVars(_disk: DiskRecord): Omit<DiskVars, 'base_iqn'> {
    return {};
  }
}
