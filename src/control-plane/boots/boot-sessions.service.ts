import { BeforeApplicationShutdown, Injectable, Logger, OnModuleInit } from '@nestjs/common';
import { AuditService } from '../audit/audit.service';
import { Clock } from '../common/clock';
import { EventBudget, UNAUTHENTICATED_AUDITS_PER_MINUTE } from '../common/once-per';
import { AppConfig } from '../config/app-config';
import { BootEvent, BootEventPrune, BootEventRepository, BootStage, DeviceCut } from '../repositories/boot-events/boot-event.repository';
import type { BootSnapshotWriter } from '../repositories/boot-events/boot-snapshot-file';
import { LedgerRepository } from '../repositories/ledger/ledger.repository';
import { SettingsService } from '../settings/settings.service';
import { BootOutcome, BootSession, BootTimeline, endedOutcome, outcomeOf, stoppedAt } from './boot-timeline';
import { SessionArena } from './session-arena';
import { ownString } from '../../shared/string-pool';
import { ApiError } from '../../shared/http/api-error';
import { storageFailure } from '../../shared/files/storage-error';

/** Sessions kept per device in memory (and so answered by GET /boots): enough to see a loop and the boots before it. */
export const SESSIONS_PER_DEVICE = 10;
/** Events older than this are pruned from the store and not loaded at start. */
export const BOOT_EVENT_RETENTION_MS = 7 * 24 * 3600_000;
/** The first prune after start comes within this (IPXE_CP_BOOT_EVENT_PRUNE_SECONDS sets the period): a restart after a loop does not wait an hour. */
const FIRST_PRUNE_AFTER_MS = 5 * 60_000;
/**
 * A prune never drops an event within this of now or of the start of a boot the timelines hold:
 * another control plane's events may still be on their way (pull), clocks of control planes
 * differ, and a boot's start may sit a millisecond after its report (BootTimeline.begin).
 */
const PRUNE_MARGIN_MS = 5 * 60_000;
/** How often local events are written and the other control planes' read. */
const FLUSH_MS = 500;
/** Events waiting to be written at most: past it the oldest are dropped (a store outage must not grow memory). */
const PENDING_MAX = 100_000;
/**
 * Pending events past which they are written at once, between the timer's flushes. A storm at
 * 100,000 seats sees ~70,000 events a second: held for up to 500 ms, every event (and the request
 * query its MAC was read from) outlived two scavenges, was promoted and died in the old
 * generation, ~150 MB of it in a 20 s storm (bench:scale, RSS after the storm). 2,000 is ~30 ms
 * of such a storm; a smaller batch only adds PostgreSQL round trips (one transaction each).
 */
const WRITE_EARLY_AT = 2000;
/** Timelines serialised per turn of the event loop while a snapshot is written (~6-9 ms at 100,000 seats). */
const SNAPSHOT_SLICE = 1000;

/** What a boot-path call saw, without its time: BootService keeps it with a cached answer. */
export type StageNote = Readonly<Omit<BootEvent, 'at' | 'node'>>;

/** A boot waiting for its disk login. */
export interface DiskWait {
  mac: string;
  worker?: string;
  target: string;
  agent: string;
  since: number;
}

export interface BootQuery {
  mac?: string;
  worker_id?: string;
  outcome?: BootOutcome;
  since?: number;
  limit: number;
}

/**
 * The boots of every device, stage by stage (issue 25). The boot path reports what it saw
 * (`seen`: an in-memory apply and a push, no I/O); batches go to the BootEventRepository every
 * 500 ms and the other control planes' events come back from it, so sessions, stuck boots and
 * boot loops are judged from the same events everywhere. A device that fails `loop_threshold`
 * boots within `loop_window_minutes` is `looping` (audited once, by the control plane that saw the
 * boot that tipped it); with loop_action `hold` its /boot-vars answer becomes the hold script until
 * an operator releases it.
 */
@Injectable()
export class BootSessionsService implements OnModuleInit, BeforeApplicationShutdown {
  private readonly log = new Logger('BootSessions');
  private readonly timelines = new Map<string, BootTimeline>();
  /** Where the timelines keep their closed boots (bytes, not objects: issue 27); a new one when the timelines are dropped. */
  private arena = new SessionArena();
  private pending: BootEvent[] = [];
  private dropped = 0;
  private timer: NodeJS.Timeout | null = null;
  private flushing: Promise<void> | null = null;
  /** Events written early since the last flush (its change listeners are told of them). */
  private writtenEarly = false;
  /** An early write failed: none until a flush writes again (a store outage is not hammered per event). */
  private earlyRefused = false;
  /** Shutting down: the last snapshot takes what is pending itself (an early write beside it could land before its position, in no line). */
  private closing = false;
  private lastPrune = 0;
  private readonly holdListeners: ((mac: string) => void)[] = [];
  private readonly stageListeners: ((stage: BootStage, seconds: number) => void)[] = [];
  private readonly endListeners: ((outcome: BootOutcome) => void)[] = [];
  private readonly startListeners: ((mac: string, stage: string) => void)[] = [];
  private readonly loopAudits = new EventBudget(UNAUTHENTICATED_AUDITS_PER_MINUTE);
  /** Devices whose boot (seen here) was sent to a disk and has not logged in yet: DiskLoginWatcher asks their agents. */
  private readonly awaiting = new Map<string, DiskWait>();
  /** The agent session that last counted as each device's disk login (a lingering one never counts twice). */
  private readonly lastLogin = new Map<string, string>();
  /** Devices looping now (kept with the timelines: a ledger commit or a scrape never scans them all). */
  private readonly loopers = new Set<string>();
  /** Timelines whose boot in progress has a deadline (BootTimeline.deadline): the change feed hears of it when it passes. */
  private deadlinesPending = 0;
  private readonly changeListeners: (() => void)[] = [];
  /** The timelines are whole (a start that failed half-way must leave no snapshot of half of them). */
  private loaded = false;
  /** How this start got its timelines: the last snapshot (and the events after it), or every stored event. */
  startedFrom: 'snapshot' | 'events' = 'events';
  /** Snapshots this process put in place. */
  snapshotsWritten = 0;
  /** While a snapshot is being written: the timelines changed meanwhile (written again at its end). */
  private snapshotTouched: Set<string> | null = null;

  constructor(
    private readonly repo: BootEventRepository,
    private readonly settings: SettingsService,
    private readonly audit: AuditService,
    private readonly clock: Clock,
    private readonly config: AppConfig,
    private readonly store: LedgerRepository,
  ) {}

  async onModuleInit(): Promise<void> {
    // A change of what a looping device boots (its binding, its worker's disks or defaults) may be
    // the fix: its hold lifts and its next boots count afresh. Released once, by the control plane
    // that made the change.
    this.store.onBootChange((c) => {
      if (c.full || !c.local) return;
      const workers = new Set(c.workers);
      for (const mac of [...this.loopers]) {
        const worker = this.timelines.get(mac)?.current?.worker;
        if (c.macs.includes(mac) || (worker && workers.has(worker))) this.releaseOnChange(mac);
      }
    });
    const now = this.clock.now().getTime();
    const since = now - BOOT_EVENT_RETENTION_MS;
    await this.restore(since, now);
    await this.repo.load(since, (e) => void this.apply(e, false, now));
    this.loaded = true;
    this.lastPrune = now - this.pruneEveryMs() + Math.min(FIRST_PRUNE_AFTER_MS, this.pruneEveryMs());
    this.timer = setInterval(() => void this.flush(), FLUSH_MS);
    this.timer.unref();
  }

  /** Before Database closes its pool (PostgreSQL): the last events, then the snapshot of the timelines. */
  async beforeApplicationShutdown(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    this.closing = true;
    await this.flush();
    // With no timer, nothing else flushes now: the snapshot writes what was seen meanwhile itself,
    // and with the store down it writes none (the next start replays what the store has).
    if (this.loaded) await this.writeSnapshot();
  }

  /** The timelines of the last snapshot (a prune's or a clean shutdown's), when the store still fits it; else none (a replay). */
  private async restore(since: number, now: number): Promise<void> {
    const stuckMs = this.stuckMs();
    try {
      const used = await this.repo.restore(since, (line) => {
        const t = BootTimeline.restore(line, SESSIONS_PER_DEVICE, this.arena);
        // A later line of the same MAC (written again because it changed while the snapshot was written) replaces the earlier.
        const was = this.timelines.get(t.mac);
        if (was) {
          was.dispose();
          if (was.deadline !== 0) this.deadlinesPending--;
        }
        this.timelines.set(t.mac, t);
        this.loopers.delete(t.mac);
        if (t.looping) this.loopers.add(t.mac);
        const s = t.current;
        if (s && s.last + stuckMs > now) this.setDeadline(t, s.last + stuckMs);
      });
      if (used) {
        this.startedFrom = 'snapshot';
        this.log.log(`boot timelines of ${this.timelines.size} devices restored from their last snapshot`);
      }
    } catch (e) {
      this.log.warn(`the boot timeline snapshot is not usable (${(e as Error).message}): replaying the stored events`);
      this.timelines.clear();
      this.arena = new SessionArena();
      this.loopers.clear();
      this.deadlinesPending = 0;
    }
  }

  /**
   * Writes the snapshot of every timeline (after each prune, and at a clean shutdown), so that a
   * start, after a crash too, replays only what came after it. Runs inside a flush (or after the
   * last one), so no other append or pull runs meanwhile. The boot path goes on between slices of
   * SNAPSHOT_SLICE timelines (all 100,000 take ~0.6 s to serialise); those it changed meanwhile
   * are written again at the end (the last line of a MAC wins). Then, in the same turn, the events
   * seen until then are taken from `pending` and appended, and the position after them is the
   * snapshot's (nothing else appends until it is committed): what load() reads after it is exactly
   * what the lines lack. Returns how many events it appended.
   */
  private async writeSnapshot(): Promise<number> {
    let w: BootSnapshotWriter;
    try {
      w = await this.repo.openSnapshot(this.clock.now().getTime(), this.config.nodeId);
    } catch (e) {
      this.log.warn(`boot timeline snapshot not written (a start after a crash replays the stored events): ${(e as Error).message}`);
      return 0;
    }
    const t0 = performance.now();
    const touched = (this.snapshotTouched = new Set<string>());
    try {
      let lines: string[] = [];
      // A Map's iterator goes on across awaits and reaches timelines added meanwhile (they are in `touched` too).
      for (const t of this.timelines.values()) {
        lines.push(t.snapshot());
        if (lines.length < SNAPSHOT_SLICE) continue;
        await w.add(lines);
        lines = [];
      }
      this.snapshotTouched = null;
      for (const mac of touched) lines.push(this.timelines.get(mac)!.snapshot());
      const batch = this.pending;
      this.pending = [];
      // Appended before the last lines are written: a snapshot file that cannot be written must not cost the events.
      const failed = await this.appendOrKeep(batch);
      if (failed) throw failed;
      await w.add(lines);
      await this.repo.commitSnapshot(w);
      this.snapshotsWritten++;
      this.log.log(`boot timelines of ${this.timelines.size} devices written to their snapshot in ${Math.round(performance.now() - t0)} ms (${touched.size} written again: changed meanwhile)`);
      return batch.length;
    } catch (e) {
      this.snapshotTouched = null;
      await w.abort();
      this.log.warn(`boot timeline snapshot not written (a start after a crash replays the stored events): ${(e as Error).message}`);
      return 0;
    }
  }

  /** Called with a MAC whose hold began or ended: its cached boot answers are stale. */
  onHoldChange(fn: (mac: string) => void): void {
    this.holdListeners.push(fn);
  }

  /** Called with each stage this control plane saw, and its time since the boot began. */
  onStage(fn: (stage: BootStage, seconds: number) => void): void {
    this.stageListeners.push(fn);
  }

  /** Called with the outcome of each boot this control plane saw end (once per boot). */
  /** Called with the MAC and first stage of each boot that begins here (its first request reached this control plane). */
  onStarted(fn: (mac: string, stage: string) => void): void {
    this.startListeners.push(fn);
  }

  onEnded(fn: (outcome: BootOutcome) => void): void {
    this.endListeners.push(fn);
  }

  /**
   * Called at most once per flush (every 500 ms) when boots changed: events written or read from
   * other control planes, or a boot in progress passed stuck_after_seconds without a next stage.
   */
  onChanged(fn: () => void): void {
    this.changeListeners.push(fn);
  }

  /** The boot path saw a stage of a known device. */
  seen(note: StageNote): void {
    // Most boot-path calls outside a boot (a repeated /boot-vars, a tool) stop here, before any allocation.
    if (note.stage !== 'report' && !this.timelines.get(note.mac)?.accepts(note.stage)) return;
    // One shape for every event (no spread): the boot path makes two of these per boot.
    const e: BootEvent = { at: this.clock.now().getTime(), mac: note.mac, stage: note.stage, node: this.config.nodeId, worker: note.worker, detail: note.detail };
    if (!this.apply(e, true)) return;
    if (this.pending.length >= PENDING_MAX) {
      this.pending.shift();
      this.dropped++;
    }
    this.pending.push(e);
    if (this.pending.length >= WRITE_EARLY_AT && !this.flushing && !this.earlyRefused && !this.closing) this.writeEarly();
  }

  /** Writes the pending events now, in the flush's place (so never beside a flush or a snapshot); the next flush does the rest. */
  private writeEarly(): void {
    const batch = this.pending;
    this.pending = [];
    this.flushing = this.appendOrKeep(batch)
      .then((failed) => {
        if (failed) this.earlyRefused = true;
        else this.writtenEarly = true;
      })
      .finally(() => (this.flushing = null));
  }

  /** Boots seen here that wait for their disk login (stale ones, past stuck_after_seconds, dropped). */
  waitingForDisk(): DiskWait[] {
    const limit = this.clock.now().getTime() - this.stuckMs();
    for (const [mac, w] of this.awaiting) if (w.since < limit) this.awaiting.delete(mac);
    return [...this.awaiting.values()];
  }

  /** An agent shows `session` (its own id) of the waiting device's target: the disk stage, once per agent session. */
  diskLogin(w: DiskWait, session: string, initiator: string): void {
    if (this.awaiting.get(w.mac) !== w || this.lastLogin.get(w.mac) === session) return;
    this.lastLogin.set(w.mac, session);
    this.seen({ mac: w.mac, stage: 'disk', ...(w.worker ? { worker: w.worker } : {}), detail: { target: w.target, agent: w.agent, initiator: initiator.slice(0, 223) } });
  }

  /** Whether /boot-vars must answer this device the hold script. */
  held(mac: string): boolean {
    const t = this.timelines.get(mac);
    return !!t?.looping && this.settings.bootPolicy.loop_action === 'hold';
  }

  /** The loop state of a device (null: not looping). */
  looping(mac: string): { since: number; reason: string } | null {
    return this.timelines.get(mac)?.looping ?? null;
  }

  /**
   * An operator releases a looping device's hold (its earlier boots no longer count). Returns
   * false when it was not looping. The release is in the boot event store before it takes effect
   * and is answered: boot events are otherwise written in batches every 500 ms, and an
   * acknowledged release lost to a kill would put the device back on hold at the next start. A
   * store that refuses it changes nothing (503/507).
   */
  async release(mac: string, client: string): Promise<boolean> {
    const was = this.timelines.get(mac)?.looping ?? null;
    if (!was) return false; // nothing to release: nothing changes, nothing is audited
    const e = this.releaseEvent(mac, client);
    // The batch seen before the release goes to the store first. Events queued while a batch was
    // already being written may land after it: a replay is right either way, since boots before
    // a release never count towards a loop.
    await this.flush();
    try {
      await this.repo.append([e]);
    } catch (err) {
      const mapped = storageFailure(err, 'the boot event store');
      throw mapped instanceof ApiError ? mapped : new ApiError(503, `the boot event store did not take the release, nothing was changed: ${(err as Error).message}`);
    }
    // Released meanwhile (another request, a ledger change, its disk reached): this one changed nothing more.
    const still = this.timelines.get(mac)?.looping ?? null;
    this.apply(e, true);
    if (!still) return false;
    await this.audit.record('device.boot_hold.release', { mac, looping_since: new Date(still.since).toISOString(), reason: still.reason, client });
    return true;
  }

  /**
   * A change of what the looping device boots lifts its hold at once (the change is durable; its
   * release is written with the next batch, and a kill before it only leaves the hold until the
   * device reaches its disk or is released).
   */
  private releaseOnChange(mac: string): void {
    const was = this.timelines.get(mac)?.looping ?? null;
    if (!was) return;
    const client = 'ledger change';
    const e = this.releaseEvent(mac, client);
    this.apply(e, true);
    this.pending.push(e);
    this.audit
      .record('device.boot_hold.release', { mac, looping_since: new Date(was.since).toISOString(), reason: was.reason, client })
      .catch((err: Error) => this.log.warn(`the release of ${mac}'s hold was not audited: ${err.message}`));
  }

  private releaseEvent(mac: string, client: string): BootEvent {
    return { mac, stage: 'release', at: this.clock.now().getTime(), node: this.config.nodeId, detail: { by: client.slice(0, 100) } };
  }

  /** The newest session of a device, or null. */
  latest(mac: string): { session: BootSession; outcome: BootOutcome } | null {
    const t = this.timelines.get(mac);
    const s = t?.current;
    if (!s) return null;
    return { session: s, outcome: outcomeOf(s, true, this.clock.now().getTime(), this.stuckMs()) };
  }

  /** Sessions matching the query, newest first. */
  query(q: BootQuery): { session: BootSession; outcome: BootOutcome; looping: boolean }[] {
    const now = this.clock.now().getTime();
    const stuckMs = this.stuckMs();
    const out: { session: BootSession; outcome: BootOutcome; looping: boolean }[] = [];
    const lines = q.mac ? [this.timelines.get(q.mac)].filter((t): t is BootTimeline => !!t) : this.timelines.values();
    for (const t of lines) {
      const sessions = t.sessions;
      for (let i = 0; i < sessions.length; i++) {
        const s = sessions[i];
        if (q.since !== undefined && s.last < q.since) continue;
        if (q.worker_id && s.worker !== q.worker_id) continue;
        const outcome = outcomeOf(s, i === sessions.length - 1, now, stuckMs);
        if (q.outcome && outcome !== q.outcome) continue;
        out.push({ session: s, outcome, looping: !!t.looping });
      }
    }
    out.sort((a, b) => b.session.started - a.session.started || (a.session.mac < b.session.mac ? -1 : a.session.mac > b.session.mac ? 1 : 0));
    return out.slice(0, q.limit);
  }

  /** MACs looping now. */
  loopingMacs(): string[] {
    return [...this.loopers].sort();
  }

  private pruneEveryMs(): number {
    return this.config.bootEventPruneSeconds * 1000;
  }

  private stuckMs(): number {
    return this.settings.bootPolicy.stuck_after_seconds * 1000;
  }

  /**
   * Applies an event to its device's timeline; false when it belongs to no boot (dropped). `now`:
   * when events of the store are applied (replay, pull), for their deadlines.
   */
  private apply(e: BootEvent, local: boolean, now = 0): boolean {
    let t = this.timelines.get(e.mac);
    if (!t) {
      // The timeline lives as long as the device: its MAC is the device record's own string (a copy
      // was ~40 bytes a seat at 100,000), else a copy, never a view of the request's query.
      const mac = this.store.devices.get(e.mac)?.mac ?? ownString(e.mac);
      this.timelines.set(mac, (t = new BootTimeline(mac, SESSIONS_PER_DEVICE, this.arena)));
    }
    this.snapshotTouched?.add(t.mac);
    const applied = this.applyTo(t, e, local);
    // Keys kept past this event are the timeline's own MAC string (see above). A stored event whose
    // deadline has passed sets none (its change is this apply's, and a flush would only clear it).
    const deadline = e.at + this.stuckMs();
    if (applied && (local || deadline > now)) this.setDeadline(t, deadline);
    if (t.looping) this.loopers.add(t.mac);
    else if (this.loopers.size !== 0) this.loopers.delete(t.mac);
    return applied;
  }

  private applyTo(t: BootTimeline, e: BootEvent, local: boolean): boolean {
    const before = t.current;
    const wasLooping = t.looping;
    const stuckMs = this.stuckMs();
    // A report begins a boot: the one it replaces is counted first, while it is still an object
    // (apply moves it to the arena, where a count would change a copy).
    if (local && before && e.stage === 'report') this.count(before, endedOutcome(before, e.at, stuckMs));
    const s = t.apply(e);
    // A report begins a boot (in the object of the one before it: BootSession.renew), nothing else does.
    const began = s !== null && e.stage === 'report';
    if (e.stage === 'release') {
      if (wasLooping) this.holdChanged(e.mac);
      return true;
    }
    if (!s) return false;
    if (local) {
      if (e.stage === 'vars' && e.detail?.answer === 'disk' && e.detail.disk && e.detail.agent) {
        this.awaiting.set(t.mac, { mac: t.mac, ...(e.worker ? { worker: e.worker } : {}), target: e.detail.disk, agent: e.detail.agent, since: e.at });
      } else if (e.stage !== 'menu' && e.stage !== 'challenge') this.awaiting.delete(e.mac);
      if (began) for (const fn of this.startListeners) fn(e.mac, e.stage);
      // The timeline returns a session only when it marked this stage on it.
      for (const fn of this.stageListeners) fn(e.stage as BootStage, Math.max(0, e.at - s.started) / 1000);
      if (e.stage === 'disk' || e.stage === 'vars') {
        const o = outcomeOf(s, true, e.at, stuckMs);
        if (o !== 'in_progress') this.count(s, o);
      }
    }
    if (t.looping && e.stage === 'disk') {
      // It reached its disk (a hold that only marks, or a boot already past the hold): it boots again.
      t.looping = null;
      this.holdChanged(e.mac);
    } else if (!t.looping && (began || e.stage === 'vars')) this.checkLoop(t, e, local);
    return true;
  }

  /** Counts a session's outcome once (GET /metrics: kurrent_boots_total). */
  private count(s: BootSession, o: BootOutcome): void {
    if (!s.countOnce()) return;
    for (const fn of this.endListeners) fn(o);
  }

  private checkLoop(t: BootTimeline, e: BootEvent, local: boolean): void {
    const p = this.settings.bootPolicy;
    const failed = t.failedBoots(e.at, p.loop_window_minutes * 60_000, p.stuck_after_seconds * 1000);
    if (failed.length < p.loop_threshold) return;
    const last = failed[failed.length - 1];
    const reason = `${failed.length} boots in ${p.loop_window_minutes} min never reached the disk (last stopped at ${stoppedAt(last)}${last.failure ? `: ${last.failure.reason}` : ''})`;
    t.looping = { since: e.at, reason };
    // Answers change only under a hold (keep-looping only marks): cached ones stay otherwise.
    if (p.loop_action === 'hold') this.holdChanged(t.mac);
    if (!local) return;
    // Boots are unauthenticated requests: a storm of loops (a room whose disks are gone) is audited
    // within the same per-minute budget as other unauthenticated events, the rest counted as `dropped`.
    const pass = this.loopAudits.take(e.at);
    if (!pass) return;
    this.log.warn(`device ${t.mac} is looping: ${reason}`);
    this.audit
      .record('device.boot_loop', { status: 'failed', mac: t.mac, worker_id: last.worker ?? null, reason, action: p.loop_action, ...(pass.dropped ? { dropped: pass.dropped } : {}) })
      .catch(() => undefined);
  }

  private holdChanged(mac: string): void {
    for (const fn of this.holdListeners) fn(mac);
  }

  /**
   * What a prune may drop: per device, the events before the oldest boot its timeline holds; a
   * looping device also keeps the loop window before its detection, so a replay marks it looping
   * again, since the same time, even when the boots that tipped it have left the timeline (a room
   * looping all day, a held seat rebooted by hand). Replaying what is kept rebuilds the same
   * timelines (boot-timeline.spec).
   */
  pruneSpec(now: number): BootEventPrune {
    const windowMs = this.settings.bootPolicy.loop_window_minutes * 60_000;
    const cuts = new Map<string, DeviceCut>();
    let held = 0;
    for (const t of this.timelines.values()) {
      const before = Math.min(now, t.oldestStarted ?? now) - PRUNE_MARGIN_MS;
      const since = t.looping?.since;
      cuts.set(t.mac, since !== undefined && since - windowMs - PRUNE_MARGIN_MS < before ? { before, keep: [since - windowMs - PRUNE_MARGIN_MS, since + PRUNE_MARGIN_MS] } : { before });
      held += t.stageCount;
      if (t.releasedAt) held++;
    }
    return { before: now - BOOT_EVENT_RETENTION_MS, cuts, held };
  }

  /** Writes the pending events, reads the other control planes', prunes every IPXE_CP_BOOT_EVENT_PRUNE_SECONDS. */
  flush(): Promise<void> {
    if (this.flushing) return this.flushing;
    this.flushing = this.doFlush().finally(() => (this.flushing = null));
    return this.flushing;
  }

  private async doFlush(): Promise<void> {
    const batch = this.pending;
    this.pending = [];
    let changed = batch.length > 0 || this.writtenEarly || this.passedDeadlines();
    this.writtenEarly = false;
    let pruned = false;
    const failed = await this.appendOrKeep(batch);
    this.earlyRefused = failed !== null;
    if (failed) {
      this.log.warn(`boot events not written (${batch.length}, kept for the next try): ${failed.message}`);
      return;
    }
    if (this.dropped) {
      this.log.warn(`${this.dropped} boot events were dropped while the store did not take them`);
      this.dropped = 0;
    }
    try {
      const pulledAt = this.clock.now().getTime();
      for (const e of await this.repo.pull()) changed = this.apply(e, false, pulledAt) || changed;
      const now = this.clock.now().getTime();
      if (now - this.lastPrune >= this.pruneEveryMs()) {
        this.lastPrune = now;
        await this.repo.prune(this.pruneSpec(now));
        pruned = true;
      }
    } catch (e) {
      this.log.warn(`boot events of other control planes not read: ${(e as Error).message}`);
    }
    // After the prune: a file rewritten by it no longer fits the snapshot before it.
    if (pruned) changed = (await this.writeSnapshot()) > 0 || changed;
    if (changed) for (const fn of this.changeListeners) fn();
  }

  /** Appends a batch; one the store refuses is kept for the next flush (the newest, past the bound: boots go on during a store outage). */
  private async appendOrKeep(batch: BootEvent[]): Promise<Error | null> {
    try {
      await this.repo.append(batch);
      return null;
    } catch (e) {
      this.pending = batch.concat(this.pending).slice(-PENDING_MAX);
      return e as Error;
    }
  }

  private setDeadline(t: BootTimeline, at: number): void {
    if (t.deadline === 0) this.deadlinesPending++;
    t.deadline = at;
  }

  /** Forgets the deadlines that passed; true when any did (a boot may have turned stuck). */
  private passedDeadlines(): boolean {
    if (this.deadlinesPending === 0) return false;
    const now = this.clock.now().getTime();
    let passed = false;
    for (const t of this.timelines.values()) {
      if (t.deadline === 0 || t.deadline > now) continue;
      t.deadline = 0;
      this.deadlinesPending--;
      passed = true;
    }
    return passed;
  }
}
