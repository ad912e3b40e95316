/** The stages of one boot, in the order a boot passes them. */
export const BOOT_STAGES = ['report', 'challenge', 'vars', 'menu', 'disk', 'os'] as const;
export type BootStage = (typeof BOOT_STAGES)[number];

/**
 * One thing seen of a device's boot (a stage reached), or an operator's release of a boot-loop
 * hold. Sessions are assembled from these (BootTimeline), the same way on every control plane.
 */
export interface BootEvent {
  /** Milliseconds since the epoch. */
  at: number;
  /** Lower-case colon form. */
  mac: string;
  stage: BootStage | 'release';
  /** The control plane that saw it (IPXE_CP_NODE_ID): only that one audits what it triggers. */
  node: string;
  /** The worker the device was bound to when it was seen, if any. */
  worker?: string;
  /** vars: what was answered; disk: the target and the agent; release: who released. Short strings only. */
  detail?: Record<string, string>;
}

/**
 * Where boot events are kept: appended in batches, read back in one order on every control plane,
 * pruned by age. The engine is chosen once by RepositoriesModule.
 */
export abstract class BootEventRepository {
  /** Events at or after `since` (ms), oldest first; the cursor of pull() starts after them. */
  abstract load(since: number): Promise<BootEvent[]>;

  /** Makes a batch durable, in its order. */
  abstract append(events: BootEvent[]): Promise<void>;

  /** Events another control plane appended since the last load or pull (never this one's own). */
  abstract pull(): Promise<BootEvent[]>;

  /** Drops events before `before` (ms); `keep` events per device are at most what a load returns. */
  abstract prune(before: number): Promise<void>;
}
