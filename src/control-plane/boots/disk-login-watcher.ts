import { Injectable, Logger, OnApplicationShutdown, OnModuleInit } from '@nestjs/common';
import type { InitiatorSessionsDto } from '../../shared/agent-contract/luns.dto';
import { AppConfig } from '../config/app-config';
import { AgentGateway } from '../storage-nodes/agent-gateway';
import { StorageNodeRegistry } from '../storage-nodes/storage-node-registry';
import { BootSessionsService, DiskWait } from './boot-sessions.service';

/**
 * The `disk` stage of a boot: while boots seen by this control plane wait for their disk login,
 * their agents are asked every IPXE_CP_DISK_WATCH_MS who is logged in (agent GET /sessions:
 * tgtd's I_T nexuses, LIO's sessions, nvmet's controllers where the kernel shows them), and a
 * session on the disk's target marks the stage. Only agents with a waiting boot are asked, one
 * call per agent per period, bounded by the probe timeout; an idle fleet costs nothing.
 */
@Injectable()
export class DiskLoginWatcher implements OnModuleInit, OnApplicationShutdown {
  private readonly log = new Logger('DiskLoginWatcher');
  private timer: NodeJS.Timeout | null = null;
  private running = false;
  /** Agents whose sessions cannot be seen (nvmet without debugfs): not asked again for a while. */
  private readonly blind = new Map<string, number>();
  private readonly warned = new Set<string>();

  constructor(
    private readonly sessions: BootSessionsService,
    private readonly registry: StorageNodeRegistry,
    private readonly gateway: AgentGateway,
    private readonly config: AppConfig,
  ) {}

  onModuleInit(): void {
    this.timer = setInterval(() => void this.tick(), this.config.diskWatchMs);
    this.timer.unref();
  }

  onApplicationShutdown(): void {
    if (this.timer) clearInterval(this.timer);
  }

  /** One pass (also called by tests). */
  async tick(): Promise<void> {
    if (this.running) return;
    this.running = true;
    try {
      const byAgent = new Map<string, DiskWait[]>();
      for (const w of this.sessions.waitingForDisk()) {
        const list = byAgent.get(w.agent);
        if (list) list.push(w);
        else byAgent.set(w.agent, [w]);
      }
      const now = Date.now();
      await Promise.all([...byAgent].map(([id, waits]) => ((this.blind.get(id) ?? 0) > now ? undefined : this.ask(id, waits, now))));
    } finally {
      this.running = false;
    }
  }

  private async ask(id: string, waits: DiskWait[], now: number): Promise<void> {
    const agent = this.registry.get(id);
    if (!agent) return;
    let r: InitiatorSessionsDto;
    try {
      r = await this.gateway.call<InitiatorSessionsDto>(agent, 'GET', '/sessions', { timeoutMs: this.config.agentProbeTimeoutMs });
    } catch (e) {
      this.once(id, `agent ${id}: sessions not read (${(e as Error).message}); boots on it show no disk stage until it answers`);
      return;
    }
    if (!r.supported) {
      this.blind.set(id, now + 60_000);
      this.once(id, `agent ${id} cannot show who is logged in (nvmet without CONFIG_NVME_TARGET_DEBUGFS): its boots show no disk stage`);
      return;
    }
    this.warned.delete(id);
    const byTarget = new Map<string, InitiatorSessionsDto['sessions']>();
    for (const s of r.sessions ?? []) {
      const list = byTarget.get(s.target);
      if (list) list.push(s);
      else byTarget.set(s.target, [s]);
    }
    for (const w of waits) {
      for (const s of byTarget.get(w.target) ?? []) this.sessions.diskLogin(w, `${id}|${s.target}|${s.initiator}|${s.id ?? s.address ?? ''}`, s.initiator);
    }
  }

  private once(id: string, message: string): void {
    if (this.warned.has(id)) return;
    this.warned.add(id);
    this.log.warn(message);
  }
}
