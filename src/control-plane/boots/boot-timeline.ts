import { BOOT_STAGES, BootEvent, BootStage } from '../repositories/boot-events/boot-event.repository';
import { ARENA_MAX, ARENA_STAGES, SessionArena } from './session-arena';

export const STAGE_ORDER: Record<BootStage, number> = Object.fromEntries(BOOT_STAGES.map((s, i) => [s, i])) as Record<BootStage, number>;
const DISK = STAGE_ORDER.disk;

export const BOOT_OUTCOMES = ['in_progress', 'booted', 'failed', 'stuck', 'superseded', 'waiting', 'held'] as const;
export type BootOutcome = (typeof BOOT_OUTCOMES)[number];

export interface StageMark {
  stage: BootStage;
  at: number;
  detail?: Readonly<Record<string, string>>;
}

/** What /boot-vars answered, as recorded in a vars event's detail.answer. */
export type VarsAnswer = 'disk' | 'item' | 'reboot' | 'pooled' | 'empty' | 'refused' | 'denied' | 'held';

type Detail = Readonly<Record<string, string>>;

const HELD = 8;
const WAITING = 16;
const COUNTED = 32;
/** The low bits of `bits`: STAGE_ORDER of the furthest stage reached. */
const REACHED = 7;

/** A stage and its time in one number: ms after the session's start x 8 + STAGE_ORDER (a small integer for 3 days). */
const code = (stage: number, offset: number) => offset * 8 + stage;
const stageOf = (c: number) => c % 8;
const offsetOf = (c: number) => (c - (c % 8)) / 8;

/**
 * One boot of one device, as assembled from its events. A fleet keeps up to 10 a device, so a
 * session is packed (issue 27): one object of fixed shape whose first three stages (report, vars
 * and the disk login of a boot that works) are fields, each a stage and its time in one small
 * integer; later stages go to one exact-sized array. As plain objects (a mark object and a boxed
 * time a stage, properties added later) a boot of report + vars held 330 bytes, 540 with its
 * disk login (100,000 seats x 10 boots: 0.3-0.5 GB); now 157 and 180.
 */
export class BootSession {
  private m0 = -1;
  private d0: Detail | null = null;
  private m1 = -1;
  private d1: Detail | null = null;
  private m2 = -1;
  private d2: Detail | null = null;
  /** Stages after the third: [code, detail, ...]; replaced, never pushed to (push keeps room for 17). */
  private more: readonly (number | Detail | null)[] | null = null;
  /** REACHED and the flags. */
  private bits = 0;
  private lastOffset = 0;
  /** Set by an answer that cannot boot the disk (refusal, reboot loop of a bound worker). */
  failure: { stage: BootStage; reason: string; answer: VarsAnswer } | undefined = undefined;

  constructor(
    readonly mac: string,
    /** Set once, but for renew(). */
    public started: number,
    public worker: string | undefined,
  ) {}

  /**
   * This object as a new boot of its device with no stage yet: BootTimeline renews its newest once
   * the arena holds that boot as bytes, so a boot of a known machine allocates no session (each
   * one lived until the device's next boot, was promoted and died in the old generation: ~50 MB
   * in a 20 s storm at 100,000 seats, bench:scale).
   */
  renew(started: number, worker: string | undefined): void {
    this.started = started;
    this.worker = worker;
    this.m0 = this.m1 = this.m2 = -1;
    this.d0 = this.d1 = this.d2 = null;
    this.more = null;
    this.bits = 0;
    this.lastOffset = 0;
    this.failure = undefined;
  }

  /** STAGE_ORDER of the furthest stage reached. */
  get reached(): number {
    return this.bits & REACHED;
  }
  /** Time of the latest stage. */
  get last(): number {
    return this.started + this.lastOffset;
  }
  /** Answered as a pooled device (the reboot loop until it is bound): not a failure. */
  get waiting(): boolean {
    return (this.bits & WAITING) !== 0;
  }
  /** Answered the boot-loop hold script. */
  get held(): boolean {
    return (this.bits & HELD) !== 0;
  }

  get stageCount(): number {
    return this.m0 < 0 ? 0 : this.m1 < 0 ? 1 : this.m2 < 0 ? 2 : 3 + (this.more ? this.more.length / 2 : 0);
  }

  /** Each stage once, at its first time, in the order seen (built on each read: for views). */
  get stages(): StageMark[] {
    const out: StageMark[] = [];
    this.eachMark((c, detail) => {
      const stage = BOOT_STAGES[stageOf(c)];
      const at = this.started + offsetOf(c);
      out.push(detail ? { stage, at, detail } : { stage, at });
    });
    return out;
  }

  /** Each marked stage's code and detail, in the order marked. */
  private eachMark(fn: (c: number, detail: Detail | null) => void): void {
    if (this.m0 >= 0) fn(this.m0, this.d0);
    if (this.m1 >= 0) fn(this.m1, this.d1);
    if (this.m2 >= 0) fn(this.m2, this.d2);
    const more = this.more ?? [];
    for (let i = 0; i < more.length; i += 2) fn(more[i] as number, more[i + 1] as Detail | null);
  }

  has(stage: BootStage): boolean {
    return this.find(STAGE_ORDER[stage]) !== -1;
  }

  /** The detail a stage was marked with (undefined: not marked, or without one). */
  detailOf(stage: BootStage): Detail | undefined {
    const i = this.find(STAGE_ORDER[stage]);
    if (i === -1) return undefined;
    return (i === -2 ? this.d0 : i === -3 ? this.d1 : i === -4 ? this.d2 : (this.more![i + 1] as Detail | null)) ?? undefined;
  }

  /** Where a stage is: -2, -3, -4 the first, second, third field; an index into `more`; -1 nowhere. */
  private find(n: number): number {
    if (this.m0 >= 0 && stageOf(this.m0) === n) return -2;
    if (this.m1 >= 0 && stageOf(this.m1) === n) return -3;
    if (this.m2 >= 0 && stageOf(this.m2) === n) return -4;
    const more = this.more;
    if (more) for (let i = 0; i < more.length; i += 2) if (stageOf(more[i] as number) === n) return i;
    return -1;
  }

  /** Marks a stage at `at` (not before `started`; whole ms): BootTimeline's rule decides whether it may. */
  mark(stage: BootStage, at: number, detail: Detail | undefined): void {
    const offset = Math.round(Math.max(at, this.started) - this.started);
    const n = STAGE_ORDER[stage];
    const c = code(n, offset);
    const d = detail ?? null;
    if (this.m0 < 0) {
      this.m0 = c;
      this.d0 = d;
    } else if (this.m1 < 0) {
      this.m1 = c;
      this.d1 = d;
    } else if (this.m2 < 0) {
      this.m2 = c;
      this.d2 = d;
    } else this.more = (this.more ?? []).concat([c, d]);
    if (n > (this.bits & REACHED)) this.bits = (this.bits & ~REACHED) | n;
    if (offset > this.lastOffset) this.lastOffset = offset;
  }

  answered(answer: VarsAnswer | undefined, reason: string | undefined): void {
    if (answer === 'held') this.bits |= HELD;
    else if (answer === 'pooled') this.bits |= WAITING;
    else if (answer && answer !== 'disk' && answer !== 'item') this.failure = { stage: 'vars', reason: reason ?? answer, answer };
  }

  /** True the first time only: a session's outcome is counted once (GET /metrics). */
  countOnce(): boolean {
    if (this.bits & COUNTED) return false;
    this.bits |= COUNTED;
    return true;
  }

  /**
   * The session as one JSON-able row for the timeline snapshot (BootTimeline.snapshot):
   * [started, worker, bits, lastOffset, failure, code, detail, code, detail, ...], a detail as its
   * index in the timeline's `details` (-1: none).
   */
  pack(detailIndex: (d: Detail) => number): unknown[] {
    const f = this.failure;
    const row: unknown[] = [this.started, this.worker ?? null, this.bits, this.lastOffset, f ? [f.stage, f.reason, f.answer] : null];
    this.eachMark((c, d) => row.push(c, d ? detailIndex(d) : -1));
    return row;
  }

  /** The session of a packed row (throws on a row pack() cannot have written). */
  static unpack(mac: string, row: unknown, details: readonly Detail[], worker: string | undefined): BootSession {
    if (!Array.isArray(row) || row.length < 5 || row.length % 2 !== 1) throw new Error('a session is not a row');
    const [started, w, bits, lastOffset, f] = row as [unknown, unknown, unknown, unknown, unknown];
    if (!isWhole(started) || !(w === null || typeof w === 'string') || !isWhole(bits) || bits >= 64 || (bits & REACHED) >= BOOT_STAGES.length || !isWhole(lastOffset)) {
      throw new Error('a session has a bad start, worker, state or offset');
    }
    const s = new BootSession(mac, started, w === null ? undefined : w === worker ? worker : w);
    s.bits = bits;
    s.lastOffset = lastOffset;
    if (f !== null) {
      if (!Array.isArray(f) || f.length !== 3 || !(BOOT_STAGES as readonly unknown[]).includes(f[0]) || typeof f[1] !== 'string' || typeof f[2] !== 'string') throw new Error('a session has a bad failure');
      s.failure = { stage: f[0] as BootStage, reason: f[1], answer: f[2] as VarsAnswer };
    }
    const more: (number | Detail | null)[] = [];
    for (let i = 5; i < row.length; i += 2) {
      const c: unknown = row[i];
      const d: unknown = row[i + 1];
      if (!isWhole(c) || stageOf(c) >= BOOT_STAGES.length || typeof d !== 'number' || !isWhole(d + 1) || d >= details.length) throw new Error('a session has a bad stage');
      const detail = d === -1 ? null : details[d];
      if (i === 5) [s.m0, s.d0] = [c, detail];
      else if (i === 7) [s.m1, s.d1] = [c, detail];
      else if (i === 9) [s.m2, s.d2] = [c, detail];
      else more.push(c, detail);
    }
    if (more.length) s.more = more;
    return s;
  }

  /**
   * Writes a closed session (one a later boot replaced: never marked again) to the arena; a slot
   * that holds this object where it does not pack (a failure, more than ARENA_STAGES stages, a code
   * or offset past ARENA_MAX). `near`: the arena slot of the device's boot before it (-1: none).
   */
  closeInto(arena: SessionArena, near: number): number {
    const n = this.stageCount;
    if (this.failure || n > ARENA_STAGES || this.lastOffset > ARENA_MAX || this.m0 > ARENA_MAX || this.m1 > ARENA_MAX || this.m2 > ARENA_MAX) {
      return arena.storeObject(this.started, this);
    }
    const codes: number[] = [];
    const details: (Detail | null)[] = [];
    if (n > 0) codes.push(this.m0), details.push(this.d0);
    if (n > 1) codes.push(this.m1), details.push(this.d1);
    if (n > 2) codes.push(this.m2), details.push(this.d2);
    if (n > 3) {
      if ((this.more![0] as number) > ARENA_MAX) return arena.storeObject(this.started, this);
      codes.push(this.more![0] as number), details.push(this.more![1] as Detail | null);
    }
    return arena.store(this.started, this.worker, this.bits, this.lastOffset, codes, details, near);
  }

  /** The session of an arena slot closeInto wrote: its own object, or a copy of what the slot holds. */
  static fromArena(mac: string, arena: SessionArena, slot: number): BootSession {
    const o = arena.object(slot);
    if (o) return o as BootSession;
    const s = new BootSession(mac, arena.started(slot), arena.worker(slot));
    s.bits = arena.bits(slot);
    s.lastOffset = arena.lastOffset(slot);
    const n = arena.count(slot);
    if (n > 0) [s.m0, s.d0] = [arena.code(slot, 0), arena.detail(slot, 0) as Detail | null];
    if (n > 1) [s.m1, s.d1] = [arena.code(slot, 1), arena.detail(slot, 1) as Detail | null];
    if (n > 2) [s.m2, s.d2] = [arena.code(slot, 2), arena.detail(slot, 2) as Detail | null];
    if (n > 3) s.more = [arena.code(slot, 3), arena.detail(slot, 3) as Detail | null];
    return s;
  }
}

/** A detail as events carry it: an object of strings. */
function isDetail(x: unknown): x is Detail {
  return typeof x === 'object' && x !== null && !Array.isArray(x) && Object.values(x).every((v) => typeof v === 'string');
}

/** A whole number of at least 0 (a time, an offset, a code, a flag set). */
function isWhole(x: unknown): x is number {
  return typeof x === 'number' && Number.isInteger(x) && x >= 0;
}

/**
 * A session's outcome at `now`: booted once the disk saw the worker log in; held, waiting or
 * failed by what /boot-vars answered; superseded when a later boot began before it got anywhere;
 * stuck when its latest stage is older than `stuckMs`; else still in progress.
 */
export function outcomeOf(s: BootSession, latest: boolean, now: number, stuckMs: number): BootOutcome {
  if (s.reached >= DISK) return 'booted';
  if (s.held) return 'held';
  if (s.waiting) return 'waiting';
  if (s.failure) return 'failed';
  if (!latest) return 'superseded';
  if (now - s.last > stuckMs) return 'stuck';
  return 'in_progress';
}

/** The outcome of a session a later boot replaced at `at`: a superseded one that had gone quiet for stuckMs was stuck. */
export function endedOutcome(s: BootSession, at: number, stuckMs: number): BootOutcome {
  const o = outcomeOf(s, false, at, stuckMs);
  return o === 'superseded' && at - s.last > stuckMs ? 'stuck' : o;
}

/**
 * Whether a boot that did not reach its disk says anything about a loop: one whose answer could
 * not boot it (a failure; not a denial: anyone can send unsigned requests for a MAC), or one that
 * never got an answer at all (it stopped before /boot-vars). A boot answered with a disk whose login
 * was not seen does not count: an agent that cannot show sessions (nvmet without debugfs), or a
 * login between two polls, must never put a healthy seat on hold.
 */
export function countsTowardsLoop(s: BootSession): boolean {
  if (s.failure) return s.failure.answer !== 'denied';
  return !s.has('vars');
}

/** The stage a session stopped at (its furthest), for failed, stuck and superseded sessions. */
export function stoppedAt(s: BootSession): BootStage {
  return s.failure?.stage ?? BOOT_STAGES[s.reached];
}

/** A device boots as the same worker again and again: its sessions share one string. */
function sameWorker(before: string | undefined, worker: string | undefined): string | undefined {
  return worker !== undefined && worker === before ? before : worker;
}

const NO_SLOT = -1;
const isFailed = (o: BootOutcome) => o === 'failed' || o === 'stuck' || o === 'superseded';
/** The arena of timelines made without one (tests); BootSessionsService gives its timelines their own. */
const DEFAULT_ARENA = new SessionArena();

/** Two details with the same fields and values (a device's boots repeat theirs: one object is kept). */
function sameDetail(a: Detail, b: Detail): boolean {
  let n = 0;
  for (const k in a) {
    if (a[k] !== b[k]) return false;
    n++;
  }
  return Object.keys(b).length === n;
}

/**
 * The boots of one device, newest last, at most `keep` of them, plus its loop state. Events are
 * applied in the order the store gives them. A boot begins at `report`, the first request of
 * boot.ipxe.cfg; every later stage extends the current boot once (its first time is kept: the OS
 * logging in again after the firmware is the same `disk` stage). A stage with no boot to extend
 * (a /boot-vars asked by hand, a stage seen twice) belongs to no boot and is dropped, so tools and
 * retries never make a boot, let alone a boot loop.
 */
export class BootTimeline {
  /** Boots before this time do not count towards a loop (an operator released the hold). */
  releasedAt = 0;
  /** Set while the device is looping: when it was detected and why. */
  looping: { since: number; reason: string } | null = null;
  /**
   * When the boot in progress turns stuck if nothing more comes (ms since the epoch; 0: none):
   * set and cleared by BootSessionsService. A field rather than a map of its own: a map entry and a
   * boxed time a seat, a new box on every event (~5 MB at 100,000 seats, and promoted garbage).
   */
  deadline = 0;
  /** The newest boot: an object, the only session ever marked. */
  private newest: BootSession | undefined = undefined;
  /** The boots before it, in the arena: the slot of the newest of them (each links to the next older), and how many. */
  private closed = NO_SLOT;
  private closedCount = 0;

  constructor(
    readonly mac: string,
    private readonly keep: number,
    private readonly arena: SessionArena = DEFAULT_ARENA,
  ) {}

  get current(): BootSession | undefined {
    return this.newest;
  }

  /**
   * The boots held, oldest first, built on each read (views: API answers, snapshots, tests). A
   * closed boot's object is a copy: marking or counting it changes nothing held.
   */
  get sessions(): BootSession[] {
    const out: BootSession[] = [];
    for (let slot = this.closed; slot !== NO_SLOT; slot = this.arena.older(slot)) out.push(BootSession.fromArena(this.mac, this.arena, slot));
    out.reverse();
    if (this.newest) out.push(this.newest);
    return out;
  }

  /** How many boots are held. */
  get sessionCount(): number {
    return this.closedCount + (this.newest ? 1 : 0);
  }

  /** When the oldest boot held began (undefined: none). */
  get oldestStarted(): number | undefined {
    if (this.closed === NO_SLOT) return this.newest?.started;
    let slot = this.closed;
    while (this.arena.older(slot) !== NO_SLOT) slot = this.arena.older(slot);
    return this.arena.started(slot);
  }

  /** Stage marks held over all boots (what a prune keeps). */
  get stageCount(): number {
    let n = this.newest?.stageCount ?? 0;
    for (let slot = this.closed; slot !== NO_SLOT; slot = this.arena.older(slot)) {
      const o = this.arena.object(slot) as BootSession | null;
      n += o ? o.stageCount : this.arena.count(slot);
    }
    return n;
  }

  /** Gives the arena slots back (a timeline dropped while its arena lives on). */
  dispose(): void {
    this.trim(0);
    this.newest = undefined;
  }

  /** A new newest boot: the one before it moves to the arena, and the oldest beyond `keep` are dropped. */
  private push(s: BootSession): void {
    this.close();
    this.newest = s;
    this.trim(this.keep - 1);
  }

  /** A new newest boot with no stage yet: the object of the one before it, renewed, where the arena holds that one as bytes. */
  private pushNew(started: number, worker: string | undefined): BootSession {
    const old = this.close();
    const s = old ?? new BootSession(this.mac, started, worker);
    old?.renew(started, worker);
    this.newest = s;
    this.trim(this.keep - 1);
    return s;
  }

  /** Moves the newest boot to the arena; returns its object when the arena holds it as bytes (free to renew). */
  private close(): BootSession | undefined {
    const s = this.newest;
    if (!s) return undefined;
    const slot = s.closeInto(this.arena, this.closed);
    this.arena.setOlder(slot, this.closed);
    this.closed = slot;
    this.closedCount++;
    this.newest = undefined;
    return this.arena.object(slot) === null ? s : undefined;
  }

  /** Keeps the newest `n` closed boots. */
  private trim(n: number): void {
    if (this.closedCount <= n) return;
    let last = NO_SLOT;
    let slot = this.closed;
    for (let i = 0; i < n; i++) [last, slot] = [slot, this.arena.older(slot)];
    if (last === NO_SLOT) this.closed = NO_SLOT;
    else this.arena.setOlder(last, NO_SLOT);
    while (slot !== NO_SLOT) {
      const older = this.arena.older(slot);
      this.arena.free(slot);
      slot = older;
    }
    this.closedCount = n;
  }

  /** The boot before the newest (its detail of a stage, its worker), read from its slot. */
  private previousDetail(stage: BootStage): Detail | undefined {
    if (this.closed === NO_SLOT) return undefined;
    const o = this.arena.object(this.closed) as BootSession | null;
    if (o) return o.detailOf(stage);
    const n = STAGE_ORDER[stage];
    for (let i = 0; i < this.arena.count(this.closed); i++) {
      if (stageOf(this.arena.code(this.closed, i)) === n) return (this.arena.detail(this.closed, i) as Detail | null) ?? undefined;
    }
    return undefined;
  }

  private previousWorker(): string | undefined {
    if (this.closed === NO_SLOT) return undefined;
    const o = this.arena.object(this.closed) as BootSession | null;
    return o ? o.worker : this.arena.worker(this.closed);
  }

  /**
   * The timeline as one JSON line of a snapshot (after each prune and at a clean shutdown), so the next start reads
   * 100,000 of these instead of replaying a week of events (3 million at 100,000 seats: 11-24 s):
   * [mac, releasedAt, looping, details, session rows...], each detail object once.
   */
  snapshot(): string {
    const details: Detail[] = [];
    const index = new Map<Detail, number>();
    const detailIndex = (d: Detail) => {
      let i = index.get(d);
      if (i === undefined) index.set(d, (i = details.push(d) - 1));
      return i;
    };
    const rows = this.sessions.map((s) => s.pack(detailIndex));
    return JSON.stringify([this.mac, this.releasedAt, this.looping ? [this.looping.since, this.looping.reason] : null, details, ...rows]);
  }

  /** The timeline of a snapshot line (throws on one snapshot() cannot have written); its newest `keep` sessions. */
  static restore(line: string, keep: number, arena: SessionArena = DEFAULT_ARENA): BootTimeline {
    const row: unknown = JSON.parse(line);
    if (!Array.isArray(row) || row.length < 4) throw new Error('a timeline is not a row');
    const [mac, releasedAt, looping, details] = row as [unknown, unknown, unknown, unknown];
    if (typeof mac !== 'string' || !isWhole(releasedAt)) throw new Error('a timeline has a bad MAC or release');
    if (!Array.isArray(details) || !details.every(isDetail)) throw new Error(`timeline ${mac}: a bad detail`);
    // JSON.parse builds strings of their own (no views of the line): the MAC can be kept as it is.
    const t = new BootTimeline(mac, keep, arena);
    t.releasedAt = releasedAt;
    if (looping !== null) {
      if (!Array.isArray(looping) || looping.length !== 2 || !isWhole(looping[0]) || typeof looping[1] !== 'string') throw new Error(`timeline ${mac}: a bad loop state`);
      t.looping = { since: looping[0], reason: looping[1] };
    }
    let prev: BootSession | undefined;
    // Oldest first, as apply() adds them: each but the newest moves to the arena.
    try {
      for (const r of row.slice(Math.max(4, row.length - keep))) {
        const s = BootSession.unpack(t.mac, r, details as Detail[], prev?.worker);
        if (prev && s.started <= prev.started) throw new Error(`timeline ${mac}: sessions out of order`);
        t.push((prev = s));
      }
    } catch (e) {
      t.dispose();
      throw e;
    }
    return t;
  }

  /** Whether a stage other than report would extend the current boot (apply's rule, without applying). */
  accepts(stage: BootStage | 'release'): boolean {
    if (stage === 'report' || stage === 'release') return true;
    const s = this.current;
    if (!s || (STAGE_ORDER[stage] < DISK && s.reached >= DISK)) return false;
    return !s.has(stage);
  }

  /** Applies one event; returns the session it began or extended (null: a release, or an event that belongs to no boot). */
  apply(e: BootEvent): BootSession | null {
    if (e.stage === 'release') {
      this.releasedAt = Math.max(this.releasedAt, e.at);
      this.looping = null;
      return null;
    }
    if (e.stage === 'report') return this.begin(e);
    // challenge, vars, menu extend a boot that has not reached its disk; disk and os come after any of them.
    if (!this.accepts(e.stage)) return null;
    const s = this.current!;
    this.mark(s, e.stage, e.at, e.detail, e.worker);
    if (e.stage === 'vars') s.answered(e.detail?.answer as VarsAnswer | undefined, e.detail?.reason);
    return s;
  }

  private begin(e: BootEvent): BootSession {
    // Two boots of one MAC within a millisecond (a report retried at once) still get distinct,
    // ordered start times: the session id and the newest-first order depend on it.
    const prev = this.current;
    const at = prev && e.at <= prev.started ? prev.started + 1 : e.at;
    const s = this.pushNew(at, sameWorker(prev?.worker, e.worker || undefined));
    this.mark(s, 'report', at, e.detail, undefined);
    return s;
  }

  /** Marks the current session; a detail equal to the previous boot's of that stage is that boot's object. */
  private mark(s: BootSession, stage: BootStage, at: number, detail: Detail | undefined, worker: string | undefined): void {
    if (detail) {
      const before = this.previousDetail(stage);
      if (before && sameDetail(before, detail)) detail = before;
    }
    s.mark(stage, at, detail);
    if (worker && !s.worker) s.worker = sameWorker(this.previousWorker(), worker);
  }

  /**
   * Boots since the release (and within `windowMs` of `now`) that ended without reaching the
   * disk (failed, stuck or superseded) and say something about a loop (countsTowardsLoop). The
   * session in progress counts once it has failed.
   */
  failedBoots(now: number, windowMs: number, stuckMs: number): BootSession[] {
    const from = Math.max(now - windowMs, this.releasedAt);
    const out: BootSession[] = [];
    // Newest first, stopping at the first boot before the window (starts only grow): no copy of an older one is made.
    const s = this.newest;
    if (s && s.started >= from && countsTowardsLoop(s) && isFailed(outcomeOf(s, true, now, stuckMs))) out.push(s);
    for (let slot = this.closed; slot !== NO_SLOT && this.arena.started(slot) >= from; slot = this.arena.older(slot)) {
      const c = BootSession.fromArena(this.mac, this.arena, slot);
      if (countsTowardsLoop(c) && isFailed(outcomeOf(c, false, now, stuckMs))) out.push(c);
    }
    return out.reverse();
  }
}
