/** Stage codes a packed session holds (report, vars, the disk login and the OS: a boot that works). */
export const ARENA_STAGES = 4;
/** The largest stage code or offset a slot holds (a Uint32). */
export const ARENA_MAX = 0xffff_ffff;

const NONE = -1;
/** meta: the session's bits (6), its stage count (3), and whether the slot holds an object instead. */
const COUNT_SHIFT = 6;
const OBJECT = 1 << 9;

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
 */
export class SessionArena {
  private cap = 0;
  private startedAt = new Float64Array(0);
  private codes = new Uint32Array(0);
  private lastOffsets = new Uint32Array(0);
  private meta = new Int32Array(0);
  private links = new Int32Array(0);
  /** Per slot: worker, then ARENA_STAGES details (object slots: the object first). */
  private refs = new Int32Array(0);
  private freeSlot = NONE;
  private used = 0;

  private items: unknown[] = [];
  private counts = new Int32Array(0);
  private index = new Map<unknown, number>();
  private freeItems: number[] = [];

  /** Slots in use (tests, measurements). */
  get size(): number {
    return this.used;
  }

  /** Shared objects held (tests: each is dropped with its last slot). */
  get shared(): number {
    return this.index.size;
  }

  /** A packed session: codes and details in the order marked (at most ARENA_STAGES, each code and offset <= ARENA_MAX). */
  store(started: number, worker: string | undefined, bits: number, lastOffset: number, codes: readonly number[], details: readonly (object | null)[]): number {
    const slot = this.take();
    this.startedAt[slot] = started;
    this.lastOffsets[slot] = lastOffset;
    this.meta[slot] = bits | (codes.length << COUNT_SHIFT);
    const r = slot * (ARENA_STAGES + 1);
    this.refs[r] = worker === undefined ? NONE : this.hold(worker);
    for (let i = 0; i < ARENA_STAGES; i++) {
      this.codes[slot * ARENA_STAGES + i] = i < codes.length ? codes[i] : 0;
      const d = i < details.length ? details[i] : null;
      this.refs[r + 1 + i] = d === null ? NONE : this.hold(d);
    }
    return slot;
  }

  /** A session that does not pack, kept as its object. */
  storeObject(started: number, o: object): number {
    const slot = this.take();
    this.startedAt[slot] = started;
    this.meta[slot] = OBJECT;
    const r = slot * (ARENA_STAGES + 1);
    this.refs[r] = this.hold(o);
    for (let i = 1; i <= ARENA_STAGES; i++) this.refs[r + i] = NONE;
    return slot;
  }

  /** The object of a slot storeObject filled, else null. */
  object(slot: number): object | null {
    return this.meta[slot] & OBJECT ? (this.items[this.refs[slot * (ARENA_STAGES + 1)]] as object) : null;
  }
  started(slot: number): number {
    return this.startedAt[slot];
  }
  worker(slot: number): string | undefined {
    const i = this.refs[slot * (ARENA_STAGES + 1)];
    return i === NONE ? undefined : (this.items[i] as string);
  }
  bits(slot: number): number {
    return this.meta[slot] & ((1 << COUNT_SHIFT) - 1);
  }
  lastOffset(slot: number): number {
    return this.lastOffsets[slot];
  }
  count(slot: number): number {
    return (this.meta[slot] >> COUNT_SHIFT) & 7;
  }
  code(slot: number, i: number): number {
    return this.codes[slot * ARENA_STAGES + i];
  }
  detail(slot: number, i: number): object | null {
    const d = this.refs[slot * (ARENA_STAGES + 1) + 1 + i];
    return d === NONE ? null : (this.items[d] as object);
  }
  /** The device's next older slot (NONE: none). */
  older(slot: number): number {
    return this.links[slot];
  }
  setOlder(slot: number, older: number): void {
    this.links[slot] = older;
  }

  /** Gives a slot back, with its hold on the shared objects. */
  free(slot: number): void {
    const r = slot * (ARENA_STAGES + 1);
    for (let i = 0; i <= ARENA_STAGES; i++) {
      if (this.refs[r + i] !== NONE) this.release(this.refs[r + i]);
      this.refs[r + i] = NONE;
    }
    this.meta[slot] = 0;
    this.links[slot] = this.freeSlot;
    this.freeSlot = slot;
    this.used--;
  }

  private take(): number {
    if (this.freeSlot === NONE) this.grow();
    const slot = this.freeSlot;
    this.freeSlot = this.links[slot];
    this.links[slot] = NONE;
    this.used++;
    return slot;
  }

  private grow(): void {
    const from = this.cap;
    const cap = Math.max(1024, from * 2);
    const grown = <A extends Float64Array | Uint32Array | Int32Array>(a: A, per: number): A => {
      const b = new (a.constructor as new (n: number) => A)(cap * per);
      b.set(a);
      return b;
    };
    this.startedAt = grown(this.startedAt, 1);
    this.codes = grown(this.codes, ARENA_STAGES);
    this.lastOffsets = grown(this.lastOffsets, 1);
    this.meta = grown(this.meta, 1);
    this.links = grown(this.links, 1);
    this.refs = grown(this.refs, ARENA_STAGES + 1);
    // The new slots, first to last, become the free list.
    for (let s = cap - 1; s >= from; s--) {
      this.links[s] = this.freeSlot;
      this.freeSlot = s;
    }
    this.cap = cap;
  }

  /** A shared object's index, counted once more (a string by its value, an object by identity). */
  private hold(x: unknown): number {
    let i = this.index.get(x);
    if (i === undefined) {
      i = this.freeItems.pop() ?? this.items.length;
      if (i === this.items.length) this.items.push(x);
      else this.items[i] = x;
      if (i >= this.counts.length) {
        const c = new Int32Array(Math.max(1024, this.counts.length * 2));
        c.set(this.counts);
        this.counts = c;
      }
      this.counts[i] = 0;
      this.index.set(x, i);
    }
    this.counts[i]++;
    return i;
  }

  private release(i: number): void {
    if (--this.counts[i] > 0) return;
    this.index.delete(this.items[i]);
    this.items[i] = undefined;
    this.freeItems.push(i);
  }
}
