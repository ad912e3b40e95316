/**
 * The keys report telemetry changed that the store does not hold yet, handed over whole to each
 * telemetry flush (take). A new Set per flush grew from nothing twice a second, and a storm's
 * outgrown tables (hundreds of KB each, large objects) lived until a full GC: ~18 MB of
 * old-generation garbage in a 20 s storm at 100,000 seats. Here a map that grows once, to the
 * keys ever marked, says whether each is dirty, and a list holds them in the order marked; a
 * flush reads the list and resets the marks in place.
 */
export class DirtyKeys {
  private readonly marked = new Map<string, boolean>();
  /** The keys marked since the last take; a key unmarked meanwhile stays here, skipped by take. */
  private list: string[] = [];
  private count = 0;

  get size(): number {
    return this.count;
  }

  has(key: string): boolean {
    return this.marked.get(key) === true;
  }

  add(key: string): void {
    if (this.marked.get(key) === true) return;
    this.marked.set(key, true);
    this.list.push(key);
    this.count++;
  }

  /** No longer dirty (a commit wrote the whole record); its mark stays for its next touch. */
  delete(key: string): void {
    if (this.marked.get(key) !== true) return;
    this.marked.set(key, false);
    if (--this.count === 0) this.list = [];
  }

  /** A key whose record is gone: its mark goes too, so the map stays the size of what is held. */
  forget(key: string): void {
    this.delete(key);
    this.marked.delete(key);
  }

  clear(): void {
    this.marked.clear();
    this.list = [];
    this.count = 0;
  }

  /** The dirty keys, each once; none is dirty afterwards. */
  take(): string[] {
    const out: string[] = [];
    for (const k of this.list) {
      if (this.marked.get(k) !== true) continue;
      this.marked.set(k, false);
      out.push(k);
    }
    this.list = [];
    this.count = 0;
    return out;
  }

  *[Symbol.iterator](): IterableIterator<string> {
    const seen = new Set<string>();
    for (const k of this.list) {
      if (this.marked.get(k) !== true || seen.has(k)) continue;
      seen.add(k);
      yield k;
    }
  }
}
