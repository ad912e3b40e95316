import type { BootSnapshotFile, BootSnapshotWriter } from './boot-snapshot-file';

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

/** What a prune keeps of one device (besides its latest release, always kept). */
export interface DeviceCut {
  /** Its events before this time (ms) go... */
  before: number;
  /** ...except those within this range (ms, inclusive): the boots that made it looping. */
  keep?: readonly [number, number];
}

/**
 * What a prune drops: events past the retention, and per device the events of boots its timeline
 * no longer holds, so the store (and the replay at start) stays bounded by what memory holds, not
 * by how often devices boot (a room in a boot loop writes thousands of events per seat a day).
 */
export interface BootEventPrune {
  /** Events before this (ms) go, whatever their device. */
  before: number;
  /** Per device. Devices not here keep their events. */
  cuts: ReadonlyMap<string, DeviceCut>;
  /** Events the timelines in memory hold: a file is rewritten only once it holds more than twice this. */
  held: number;
}

/**
 * The events a prune keeps, in their order (the rule every engine applies), fed one at a time so a
 * file is pruned without holding what it drops: a release is kept until a later one of its device.
 */
export class PruneFilter {
  private readonly kept: (BootEvent | null)[] = [];
  private readonly lastRelease = new Map<string, number>();

  constructor(private readonly p: BootEventPrune) {}

  push(e: BootEvent): void {
    if (e.at < this.p.before) return;
    if (e.stage === 'release') {
      const was = this.lastRelease.get(e.mac);
      if (was !== undefined) this.kept[was] = null;
      this.lastRelease.set(e.mac, this.kept.length);
      this.kept.push(e);
      return;
    }
    const c = this.p.cuts.get(e.mac);
    if (!c || e.at >= c.before || (c.keep && e.at >= c.keep[0] && e.at <= c.keep[1])) this.kept.push(e);
  }

  result(): BootEvent[] {
    return this.kept.filter((e): e is BootEvent => e !== null);
  }
}

export function keptByPrune(events: readonly BootEvent[], p: BootEventPrune): BootEvent[] {
  const f = new PruneFilter(p);
  for (const e of events) f.push(e);
  return f.result();
}

/**
 * Where boot events are kept: appended in batches, read back in one order on every control plane,
 * pruned by age and by what the timelines hold. The engine is chosen once by RepositoriesModule.
 *
 * Every prune and a clean shutdown also leave a snapshot of the timelines (BootSnapshotFile) with
 * the engine's position in the store; the next start, after a crash too, reads it and only the
 * events after that position, instead of replaying the whole retention (a week of boots at 100,000
 * seats is 3 million events).
 */
export abstract class BootEventRepository {
  /** Where the snapshot being restored stands: load() reads what came after it. */
  protected resumeAfter: { cursor: unknown; node: string } | null = null;

  constructor(private readonly snapshots: BootSnapshotFile) {}

  /**
   * Hands each event at or after `since` (ms) to `apply`, oldest first, as it is read (never all
   * of them at once: a store may hold millions before its first prune); the cursor of pull()
   * starts after them. After restore() returned true: only the events the snapshot lacks (those
   * after its position; on PostgreSQL not those of its writer that it holds, see commitSnapshot).
   */
  abstract load(since: number, apply: (e: BootEvent) => void): Promise<void>;

  /**
   * Takes the last snapshot, a prune's or a clean shutdown's (it is removed either way), and, when it was written
   * since `since` and still stands for this store, hands each of its lines to `take` and returns
   * true. False: none, or one that no longer fits the store (load() then reads everything).
   * An exception from `take` (a line that is not a timeline) fails it as a whole.
   */
  async restore(since: number, take: (line: string) => void): Promise<boolean> {
    this.resumeAfter = null;
    const header = await this.snapshots.take(async (h) => h.at >= since && (await this.stands(h.cursor)), take);
    if (header) this.resumeAfter = { cursor: header.cursor, node: header.node };
    return header !== null;
  }

  /** Starts a snapshot of the timelines (BootSnapshotWriter: their lines, then commitSnapshot). */
  openSnapshot(at: number, node: string): Promise<BootSnapshotWriter> {
    return this.snapshots.open(at, node);
  }

  /**
   * Puts the snapshot in place at the store's position now. Called once every event that the
   * lines hold and this control plane saw has been appended, and before any other is: the events
   * load() reads after this position are then exactly those the lines lack.
   */
  commitSnapshot(w: BootSnapshotWriter): Promise<void> {
    return w.commit(this.position());
  }

  /** The store's position: what load() would resume after. */
  protected abstract position(): unknown;

  /** Whether a snapshot's position is still one of this store (same file, same database, not pruned away). */
  protected abstract stands(cursor: unknown): Promise<boolean>;

  /** Makes a batch durable, in its order. */
  abstract append(events: BootEvent[]): Promise<void>;

  /** Events another control plane appended since the last load or pull (never this one's own). */
  abstract pull(): Promise<BootEvent[]>;

  /** Drops what keptByPrune would not keep (a file may skip it while it is small). */
  abstract prune(p: BootEventPrune): Promise<void>;
}
