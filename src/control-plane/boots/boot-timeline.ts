import { BOOT_STAGES, BootEvent, BootStage } from '../repositories/boot-events/boot-event.repository';

export const STAGE_ORDER: Record<BootStage, number> = Object.fromEntries(BOOT_STAGES.map((s, i) => [s, i])) as Record<BootStage, number>;
const DISK = STAGE_ORDER.disk;

export const BOOT_OUTCOMES = ['in_progress', 'booted', 'failed', 'stuck', 'superseded', 'waiting', 'held'] as const;
export type BootOutcome = (typeof BOOT_OUTCOMES)[number];

export interface StageMark {
  stage: BootStage;
  at: number;
  detail?: Record<string, string>;
}

/** One boot of one device, as assembled from its events. */
export interface BootSession {
  mac: string;
  worker?: string;
  started: number;
  /** Each stage once, at its first time, in the order seen. */
  stages: StageMark[];
  /** STAGE_ORDER of the furthest stage reached. */
  reached: number;
  /** Time of the latest stage. */
  last: number;
  /** Set by an answer that cannot boot the disk (refusal, reboot loop of a bound worker). */
  failure?: { stage: BootStage; reason: string; answer: VarsAnswer };
  /** Answered as a pooled device (the reboot loop until it is bound): not a failure. */
  waiting?: boolean;
  /** Answered the boot-loop hold script. */
  held?: boolean;
}

/** What /boot-vars answered, as recorded in a vars event's detail.answer. */
export type VarsAnswer = 'disk' | 'item' | 'reboot' | 'pooled' | 'empty' | 'refused' | 'denied' | 'held';

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
  return !s.stages.some((m) => m.stage === 'vars');
}

/** The stage a session stopped at (its furthest), for failed, stuck and superseded sessions. */
export function stoppedAt(s: BootSession): BootStage {
  return s.failure?.stage ?? s.stages.reduce((a, m) => (STAGE_ORDER[m.stage] > STAGE_ORDER[a] ? m.stage : a), s.stages[0].stage);
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
  /**
   * Replaced, never pushed to (here and a session's stages): an array grown by push keeps room for
   * 17 elements, ~250 bytes a seat of empty slots at 100,000 seats (issue 27); concat allocates
   * exactly what it holds.
   */
  sessions: BootSession[] = [];
  /** Boots before this time do not count towards a loop (an operator released the hold). */
  releasedAt = 0;
  /** Set while the device is looping: when it was detected and why. */
  looping: { since: number; reason: string } | null = null;

  constructor(
    readonly mac: string,
    private readonly keep: number,
  ) {}

  get current(): BootSession | undefined {
    return this.sessions[this.sessions.length - 1];
  }

  /** Whether a stage other than report would extend the current boot (apply's rule, without applying). */
  accepts(stage: BootStage | 'release'): boolean {
    if (stage === 'report' || stage === 'release') return true;
    const s = this.current;
    if (!s || (STAGE_ORDER[stage] < DISK && s.reached >= DISK)) return false;
    for (let i = 0; i < s.stages.length; i++) if (s.stages[i].stage === stage) return false;
    return true;
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
    this.mark(s, e);
    if (e.stage === 'vars') this.answered(s, e.detail?.answer as VarsAnswer | undefined, e.detail?.reason);
    return s;
  }

  private begin(e: BootEvent): BootSession {
    // Two boots of one MAC within a millisecond (a report retried at once) still get distinct,
    // ordered start times: the session id and the newest-first order depend on it.
    const prev = this.sessions[this.sessions.length - 1];
    if (prev && e.at <= prev.started) e = { ...e, at: prev.started + 1 };
    const s: BootSession = e.worker
      ? { mac: this.mac, started: e.at, stages: [], reached: 0, last: e.at, worker: e.worker }
      : { mac: this.mac, started: e.at, stages: [], reached: 0, last: e.at };
    const sessions = this.sessions.concat([s]);
    this.sessions = sessions.length > this.keep ? sessions.slice(1) : sessions;
    this.mark(s, e);
    return s;
  }

  private mark(s: BootSession, e: BootEvent): void {
    const stage = e.stage as BootStage;
    // A boot's start may have been moved 1 ms on (begin); its stages never come before it.
    const at = Math.max(e.at, s.started);
    s.stages = s.stages.concat([e.detail ? { stage, at, detail: e.detail } : { stage, at }]);
    s.reached = Math.max(s.reached, STAGE_ORDER[stage]);
    s.last = Math.max(s.last, at);
    if (e.worker && !s.worker) s.worker = e.worker;
  }

  private answered(s: BootSession, answer: VarsAnswer | undefined, reason: string | undefined): void {
    if (answer === 'held') s.held = true;
    else if (answer === 'pooled') s.waiting = true;
    else if (answer && answer !== 'disk' && answer !== 'item') s.failure = { stage: 'vars', reason: reason ?? answer, answer };
  }

  /**
   * Boots since the release (and within `windowMs` of `now`) that ended without reaching the
   * disk (failed, stuck or superseded) and say something about a loop (countsTowardsLoop). The
   * session in progress counts once it has failed.
   */
  failedBoots(now: number, windowMs: number, stuckMs: number): BootSession[] {
    const from = Math.max(now - windowMs, this.releasedAt);
    const out: BootSession[] = [];
    for (let i = 0; i < this.sessions.length; i++) {
      const s = this.sessions[i];
      if (s.started < from || !countsTowardsLoop(s)) continue;
      const o = outcomeOf(s, i === this.sessions.length - 1, now, stuckMs);
      if (o === 'failed' || o === 'stuck' || o === 'superseded') out.push(s);
    }
    return out;
  }
}
