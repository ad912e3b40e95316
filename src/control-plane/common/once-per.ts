/**
 * Lets a key through once per period: an unauthenticated flood yields one audit record per key
 * and period, never one per request. Memory is capped (the map is emptied when full).
 */
export class OncePer {
  private readonly last = new Map<string, number>();

  constructor(
    private readonly periodMs: number,
    private readonly cap = 10_000,
  ) {}

  allow(key: string, now: number): boolean {
    const t = this.last.get(key);
    if (t !== undefined && now - t < this.periodMs) return false;
    if (this.last.size >= this.cap) this.last.clear();
    this.last.set(key, now);
    return true;
  }
}

/** Per kind of unauthenticated event (device.key.invalid, boot.denied, ...), across all MACs. */
export const UNAUTHENTICATED_AUDITS_PER_MINUTE = 120;

/**
 * A budget for one kind of unauthenticated audit event across all keys: at most `perMinute`
 * entries per minute; what it holds back is counted and reported on the next entry it lets
 * through (`dropped`), so a flood of distinct MACs costs a bounded number of audit writes.
 */
export class EventBudget {
  private windowStart = -Infinity;
  private used = 0;
  private held = 0;

  constructor(private readonly perMinute: number) {}

  /** null: hold this event back; else let it through, with the count held back before it. */
  take(now: number): { dropped: number } | null {
    if (now - this.windowStart >= 60_000) {
      this.windowStart = now;
      this.used = 0;
    }
    if (this.used >= this.perMinute) {
      this.held++;
      return null;
    }
    this.used++;
    const dropped = this.held;
    this.held = 0;
    return { dropped };
  }
}
