import { Injectable, OnApplicationShutdown, OnModuleInit } from '@nestjs/common';
import { AppConfig } from '../config/app-config';
import { StorageNodeRegistry } from './storage-node-registry';
import { StorageNodesService } from './storage-nodes.service';

/**
 * Probes every enabled agent every IPXE_CP_AGENT_WATCH_MS (the same probe as GET /agents?live),
 * so a dead agent shows as `agent-down` in readiness and reaches open pages through the change
 * feed without anyone pressing Refresh. Listeners hear only of flips (up <-> down, capabilities).
 */
@Injectable()
export class AgentHealthWatcher implements OnModuleInit, OnApplicationShutdown {
  private timer: NodeJS.Timeout | null = null;
  private running = false;
  private readonly listeners: ((agentId: string) => void)[] = [];
  private seen = new Map<string, string>();

  constructor(
    private readonly registry: StorageNodeRegistry,
    private readonly nodes: StorageNodesService,
    private readonly config: AppConfig,
  ) {}

  onModuleInit(): void {
    if (!this.config.agentWatchMs) return;
    this.timer = setInterval(() => void this.tick(), this.config.agentWatchMs);
    this.timer.unref();
  }

  onApplicationShutdown(): void {
    if (this.timer) clearInterval(this.timer);
  }

  /** Called with the id of an agent whose health or capabilities changed. */
  onFlip(fn: (agentId: string) => void): void {
    this.listeners.push(fn);
  }

  /** One pass over the agents, in parallel, each bounded by the probe timeout (also called by tests). */
  async tick(): Promise<void> {
    if (this.running) return;
    this.running = true;
    try {
      const next = new Map<string, string>();
      await Promise.all(
        this.registry.all().map(async (a) => {
          if (!a.enabled) return next.set(a.id, 'disabled');
          const state = await this.nodes.capabilities(a).then(
            (caps) => `up ${JSON.stringify(caps)}`,
            () => 'down',
          );
          next.set(a.id, state);
        }),
      );
      const ids = new Set([...this.seen.keys(), ...next.keys()]);
      const before = this.seen;
      this.seen = next;
      for (const id of ids) if (before.get(id) !== next.get(id)) for (const fn of this.listeners) fn(id);
    } finally {
      this.running = false;
    }
  }
}
