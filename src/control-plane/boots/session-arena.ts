/** Stage codes a packed session holds (report, vars, the disk login and the OS: a boot that works). */
export const ARENA_STAGES = 4;
/** The largest stage code or offset a slot holds (a Uint32). */
export const ARENA_MAX = 0xffff_ffff;

const NONE = -1;
/** meta: the session's bits (6), its stage count (3), and whether the slot holds an object instead. */
const COUNT_SHIFT = 6;
const OBJECT = 1 << 9;

/** Slots a page holds (4,096: 224 KB): the arena grows a page at a time. */
const PAGE_BITS = 12;
const PAGE = 1 << PAGE_BITS;
const IN_PAGE = PAGE - 1;
/** Item references a slot holds: its worker (or its object), then ARENA_STAGES details. */
const REFS = ARENA_STAGES + 1;

/** The slots of one page, field by field. */
class ArenaPage {
  readonly startedAt = new Float64Array(PAGE);
  readonly codes = new Uint32Array(PAGE * ARENA_STAGES);
  readonly lastOffsets = new Uint32Array(PAGE);
  readonly meta = new Int32Array(PAGE);
  readonly links = new Int32Array(PAGE);
  readonly refs = new Int32Array(PAGE * REFS);
}

/**
 * The closed boots of every device (all but each timeline's newest), as bytes (issue 27). Node 20
 * runs V8 without pointer compression: a session object was 128 bytes plus a boxed start time and
 * its slot in an array, ~150 bytes, and a fleet keeps 10 a device (1,000,000 at 100,000 seats).
 * A slot here is 56 bytes in typed arrays the GC never walks: its start (f64), up to four stage
 * codes (u32), its last offset (u32), its bits, its link to the device's next older slot, and its
 * worker and details as indices into a table of the objects they share (a device's boots repeat
 * one detail object and one worker string; a table entry is counted and dropped with its last
 * slot). A session that does not fit (more stages, a failure, offsets past 2^32 ms) keeps its
 * object in the table instead: rare, and exact.
 *
 * Slots live in pages of 4,096 added as needed, never copied: arrays grown by doubling held up to
 * twice the slots in use (29 MB for ~300,000 boots after a 20 s storm at 100,000 seats), and each
 * outgrown set of arrays stayed resident until a full GC. A table entry is shared by a device's
 * boots only: `store` is given the device's previous slot and reuses the entries it refers to, so
 * no map from objects to entries is kept (one entry a worker and a detail a device, ~7 MB of hash
 * table at 100,000 seats, outgrown twice over in a first storm).
 */
export class SessionArena {
  private readonly pages: ArenaPage[] = [];
  private freeSlot = NONE;
  private used = 0;

  private items: unknown[] = [];
  private counts = new Int32Array(0);
  private freeItems: number[] = [];

  /** Slots in use (tests, measurements). */
  get size(): number {
    return this.used;
  }

  /** Slots in the pages held, used or free (tests, measurements). */
  get capacity(): number {
    return this.pages.length * PAGE;
  }

  /** Shared objects held (tests: each is dropped with its last slot). */
  get shared(): number {
    return this.items.length - this.freeItems.length;
  }

  /**
   * A packed session: codes and details in the order marked (at most ARENA_STAGES, each code and
   * offset <= ARENA_MAX). `near`: the slot of the same device's previous boot (NONE: none), whose
   * worker and details are reused when they are the same.
   */
  store(started: number, worker: string | undefined, bits: number, lastOffset: number, codes: readonly number[], details: readonly (object | null)[], near: number): number {
    const slot = this.take();
    const p = this.pages[slot >> PAGE_BITS];
    const i = slot & IN_PAGE;
    p.startedAt[i] = started;
    p.lastOffsets[i] = lastOffset;
    p.meta[i] = bits | (codes.length << COUNT_SHIFT);
    const r = i * REFS;
    p.refs[r] = worker === undefined ? NONE : this.hold(worker, near);
    for (let k = 0; k < ARENA_STAGES; k++) {
      p.codes[i * ARENA_STAGES + k] = k < codes.length ? codes[k] : 0;
      const d = k < details.length ? details[k] : null;
      p.refs[r + 1 + k] = d === null ? NONE : this.hold(d, near);
    }
    return slot;
  }

  /** A session that does not pack, kept as its object. */
  storeObject(started: number, o: object): number {
    const slot = this.take();
    const p = this.pages[slot >> PAGE_BITS];
    const i = slot & IN_PAGE;
    p.startedAt[i] = started;
    p.meta[i] = OBJECT;
    const r = i * REFS;
    p.refs[r] = this.hold(o, NONE);
    for (let k = 1; k < REFS; k++) p.refs[r + k] = NONE;
    return slot;
  }

  /** The object of a slot storeObject filled, else null. */
  object(slot: number): object | null {
    const p = this.pages[slot >> PAGE_BITS];
    const i = slot & IN_PAGE;
    return p.meta[i] & OBJECT ? (this.items[p.refs[i * REFS]] as object) : null;
  }
  started(slot: number): number {
    return this.pages[slot >> PAGE_BITS].startedAt[slot & IN_PAGE];
  }
  worker(slot: number): string | undefined {
    const k = this.pages[slot >> PAGE_BITS].refs[(slot & IN_PAGE) * REFS];
    return k === NONE ? undefined : (this.items[k] as string);
  }
  bits(slot: number): number {
    return this.pages[slot >> PAGE_BITS].meta[slot & IN_PAGE] & ((1 << COUNT_SHIFT) - 1);
  }
  lastOffset(slot: number): number {
    return this.pages[slot >> PAGE_BITS].lastOffsets[slot & IN_PAGE];
  }
  count(slot: number): number {
    return (this.pages[slot >> PAGE_BITS].meta[slot & IN_PAGE] >> COUNT_SHIFT) & 7;
  }
  code(slot: number, k: number): number {
    return this.pages[slot >> PAGE_BITS].codes[(slot & IN_PAGE) * ARENA_STAGES + k];
  }
  detail(slot: number, k: number): object | null {
    const d = this.pages[slot >> PAGE_BITS].refs[(slot & IN_PAGE) * REFS + 1 + k];
    return d === NONE ? null : (this.items[d] as object);
  }
  /** The device's next older slot (NONE: none). */
  older(slot: number): number {
    return this.pages[slot >> PAGE_BITS].links[slot & IN_PAGE];
  }
  setOlder(slot: number, older: number): void {
    this.pages[slot >> PAGE_BITS].links[slot & IN_PAGE] = older;
  }

  /** Gives a slot back, with its hold on the shared objects. */
  free(slot: number): void {
    const p = this.pages[slot >> PAGE_BITS];
    const i = slot & IN_PAGE;
    const r = i * REFS;
    for (let k = 0; k < REFS; k++) {
      if (p.refs[r + k] !== NONE) this.release(p.refs[r + k]);
      p.refs[r + k] = NONE;
    }
    p.meta[i] = 0;
    p.links[i] = this.freeSlot;
    this.freeSlot = slot;
    this.used--;
  }

  private take(): number {
    if (this.freeSlot === NONE) this.grow();
    const slot = this.freeSlot;
    const p = this.pages[slot >> PAGE_BITS];
    const i = slot & IN_PAGE;
    this.freeSlot = p.links[i];
    p.links[i] = NONE;
    this.used++;
    return slot;
  }

  /** A new page, its slots (first to last) the free list. */
  private grow(): void {
    const p = new ArenaPage();
    const from = this.pages.length * PAGE;
    this.pages.push(p);
    for (let i = PAGE - 1; i >= 0; i--) {
      p.links[i] = this.freeSlot;
      this.freeSlot = from + i;
    }
  }

  /** x's entry, counted once more: the one `near`'s slot refers to when it is x, else a new one. */
  private hold(x: unknown, near: number): number {
    if (near !== NONE) {
      const p = this.pages[near >> PAGE_BITS];
      const r = (near & IN_PAGE) * REFS;
      for (let k = 0; k < REFS; k++) {
        const e = p.refs[r + k];
        if (e !== NONE && this.items[e] === x) {
          this.counts[e]++;
          return e;
        }
      }
    }
    const e = this.freeItems.pop() ?? this.items.length;
    if (e === this.items.length) this.items.push(x);
    else this.items[e] = x;
    if (e >= this.counts.length) {
      const c = new Int32Array(Math.max(1024, this.counts.length * 2));
      c.set(this.counts);
      this.counts = c;
    }
    this.counts[e] = 1;
    return e;
  }

  private release(e: number): void {
    if (--this.counts[e] > 0) return;
    this.items[e] = undefined;
    this.freeItems.push(e);
  }
}
