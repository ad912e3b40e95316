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
