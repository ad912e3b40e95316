/**
 * One string per distinct value of the fields a fleet repeats (manufacturer, model, chip, bus id,
 * states): a device record keeps the pooled copy, so the copy each report or each parsed ledger
 * line made dies young instead of living as long as the record (issue 27: ~2 KB a seat stayed
 * after a 100,000-seat storm). Bounded, since reports are unauthenticated: past `cap` distinct
 * values a new one is kept as it came. No effect on meaning: equal strings are equal either way.
 */
export class StringPool {
  private readonly strings = new Map<string, string>();

  constructor(private readonly cap: number) {}

  get size(): number {
    return this.strings.size;
  }

  of(s: string): string {
    const pooled = this.strings.get(s);
    if (pooled !== undefined) return pooled;
    if (this.strings.size < this.cap && s.length <= 128) this.strings.set(s, s);
    return s;
  }
}

/** The process's pool for fleet-wide repeated record values. */
export const fleetStrings = new StringPool(4096);
