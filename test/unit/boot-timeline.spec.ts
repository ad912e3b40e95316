import { Logger } from '@nestjs/common';
import * as fs from 'node:fs';
import * as path from 'node:path';
import type { AppConfig } from '../../src/control-plane/config/app-config';
import { BootSnapshotFile } from '../../src/control-plane/repositories/boot-events/boot-snapshot-file';
import { FileBootEventRepository } from '../../src/control-plane/repositories/boot-events/file-boot-event.repository';
import { FileSystem } from '../../src/shared/files/file-system';
import { tempDir } from '../helpers/app';
import { BootEvent, keptByPrune } from '../../src/control-plane/repositories/boot-events/boot-event.repository';
import { BootTimeline, endedOutcome, outcomeOf } from '../../src/control-plane/boots/boot-timeline';
import { BootSessionsService } from '../../src/control-plane/boots/boot-sessions.service';
import { sessionView } from '../../src/control-plane/boots/boots.service';
import { parseSessions } from '../../src/storage-agent/backends/stgt.backend';
import { renderHold } from '../../src/control-plane/boot/ipxe-script';

const MAC = '02:00:00:00:00:01';
const ev = (at: number, stage: BootEvent['stage'], detail?: Record<string, string>): BootEvent => ({ at, mac: MAC, stage, node: 'n1', ...(detail ? { detail } : {}) });
const disk = { answer: 'disk', disk: 'iqn.2026-07.com.k:w1.ubuntu', transport: 'iscsi', agent: 'a' };
const STUCK = 300_000;
/** A store that never has a snapshot (and takes none). */
const NO_SNAPSHOT = { restore: () => Promise.resolve(false), openSnapshot: () => Promise.reject(new Error('no snapshots here')) };

describe('boot timeline: sessions assembled from stage events', () => {
  it('one boot from report to os; a later report begins the next', () => {
    const t = new BootTimeline(MAC, 20);
    for (const [at, stage] of [[0, 'report'], [10, 'challenge'], [20, 'vars'], [30, 'menu'], [5000, 'disk'], [30_000, 'os']] as const) t.apply(ev(at, stage, stage === 'vars' ? disk : undefined));
    expect(t.sessions).toHaveLength(1);
    expect(t.sessions[0].stages.map((m) => m.stage)).toEqual(['report', 'challenge', 'vars', 'menu', 'disk', 'os']);
    expect(outcomeOf(t.current!, true, 40_000, STUCK)).toBe('booted');
    t.apply(ev(60_000, 'report'));
    expect(t.sessions).toHaveLength(2);
    expect(outcomeOf(t.sessions[0], false, 60_000, STUCK)).toBe('booted');
  });

  it('two reports within one millisecond begin two boots with distinct start times, in order', () => {
    const t = new BootTimeline(MAC, 20);
    t.apply(ev(100, 'report'));
    t.apply(ev(100, 'vars', { answer: 'reboot' }));
    t.apply(ev(100, 'report'));
    t.apply(ev(99, 'report')); // a clock step back changes nothing either
    expect(t.sessions.map((s) => s.started)).toEqual([100, 101, 102]);
    expect(t.sessions[2].stages).toEqual([{ stage: 'report', at: 102 }]);
    // a stage that arrives in the same millisecond as its moved start is never before it
    t.apply(ev(100, 'vars', { answer: 'reboot' }));
    expect(t.sessions[2].stages.map((m) => m.at - t.sessions[2].started)).toEqual([0, 0]);
  });

  it('only a report begins a boot: a stage with no boot to extend, or seen twice, is dropped (a /boot-vars asked by hand is no boot)', () => {
    const t = new BootTimeline(MAC, 20);
    expect(t.apply(ev(0, 'vars', disk))).toBeNull();
    expect(t.apply(ev(1, 'disk'))).toBeNull();
    expect(t.sessions).toHaveLength(0);
    t.apply(ev(10, 'report'));
    t.apply(ev(11, 'vars', disk));
    expect(t.apply(ev(12, 'vars', { answer: 'reboot' }))).toBeNull();
    t.apply(ev(13, 'menu'));
    expect(t.sessions.map((s) => s.stages.map((m) => m.stage))).toEqual([['report', 'vars', 'menu']]);
    expect(t.current!.failure).toBeUndefined();
  });

  it('disk and os seen again (the OS logs in after the firmware) keep their first time; nothing before the disk comes after it', () => {
    const t = new BootTimeline(MAC, 20);
    t.apply(ev(0, 'report'));
    t.apply(ev(5, 'vars', disk));
    t.apply(ev(7, 'disk'));
    t.apply(ev(9, 'disk'));
    expect(t.apply(ev(10, 'menu'))).toBeNull();
    t.apply(ev(20, 'os'));
    expect(t.current!.stages.map((m) => [m.stage, m.at])).toEqual([['report', 0], ['vars', 5], ['disk', 7], ['os', 20]]);
  });

  it('outcomes: failed by the answer, waiting for a pooled device, held, stuck after the quiet period, in progress before', () => {
    const t = new BootTimeline(MAC, 20);
    t.apply(ev(0, 'report'));
    t.apply(ev(0, 'vars', { answer: 'reboot', reason: 'no default disk' }));
    expect(outcomeOf(t.current!, true, 1, STUCK)).toBe('failed');
    expect(t.current!.failure).toEqual({ stage: 'vars', reason: 'no default disk', answer: 'reboot' });
    t.apply(ev(10, 'report'));
    t.apply(ev(11, 'vars', { answer: 'pooled' }));
    expect(outcomeOf(t.current!, true, 12, STUCK)).toBe('waiting');
    t.apply(ev(20, 'report'));
    t.apply(ev(21, 'vars', { answer: 'held', reason: 'loop' }));
    expect(outcomeOf(t.current!, true, 22, STUCK)).toBe('held');
    t.apply(ev(30, 'report'));
    t.apply(ev(31, 'vars', { answer: 'item', item: 'exit' }));
    expect(outcomeOf(t.current!, true, 31 + STUCK, STUCK)).toBe('in_progress');
    expect(outcomeOf(t.current!, true, 32 + STUCK, STUCK)).toBe('stuck');
    t.apply(ev(40 + STUCK, 'report'));
    expect(endedOutcome(t.sessions[3], 40 + STUCK, STUCK)).toBe('stuck');
    expect(outcomeOf(t.sessions[3], false, 40 + STUCK, STUCK)).toBe('superseded');
    expect(endedOutcome(t.sessions[3], 40, STUCK)).toBe('superseded');
  });

  it('counts failed, stuck and superseded boots since the release and within the window; keeps at most `keep` sessions', () => {
    const t = new BootTimeline(MAC, 3);
    for (let i = 0; i < 5; i++) {
      t.apply(ev(i * 1000, 'report'));
      t.apply(ev(i * 1000 + 1, 'vars', { answer: 'empty', reason: 'credential revoked' }));
    }
    expect(t.sessions).toHaveLength(3);
    expect(t.failedBoots(5000, 600_000, STUCK)).toHaveLength(3);
    expect(t.failedBoots(5000, 2500, STUCK)).toHaveLength(2);
    t.apply({ ...ev(4500, 'release'), detail: { by: 'op' } });
    expect(t.failedBoots(5000, 600_000, STUCK)).toHaveLength(0);
    // Refused by signature enforcement: shown as failed, never counted (unsigned requests for its MAC must not hold a device).
    for (let i = 5; i < 9; i++) {
      t.apply(ev(i * 1000, 'report'));
      t.apply(ev(i * 1000 + 1, 'vars', { answer: 'denied', reason: 'bad signature' }));
    }
    expect(outcomeOf(t.current!, true, 9000, STUCK)).toBe('failed');
    expect(t.failedBoots(9000, 600_000, STUCK)).toHaveLength(0);
    // Answered with a disk whose login was not seen (nvmet without debugfs): superseded, never counted.
    // A boot that never got an answer (stopped at its report) counts.
    for (let i = 9; i < 13; i++) {
      t.apply(ev(i * 1000, 'report'));
      t.apply(ev(i * 1000 + 1, 'vars', disk));
    }
    expect(outcomeOf(t.sessions[t.sessions.length - 2], false, 13_000, STUCK)).toBe('superseded');
    expect(t.failedBoots(13_000, 600_000, STUCK)).toHaveLength(0);
    t.apply(ev(14_000, 'report'));
    t.apply(ev(15_000, 'report'));
    expect(t.failedBoots(15_000, 600_000, STUCK)).toHaveLength(1);
  });
});

describe('boot timeline: the newest boot in the object of the one before it', () => {
  it('a boot that packs leaves its object to the next boot, renewed; one kept as an object (a failure) does not; what is held is the same', () => {
    const t = new BootTimeline(MAC, 10);
    t.apply(ev(1000, 'report'));
    const first = t.current!;
    t.apply(ev(1001, 'vars', disk));
    t.apply(ev(1002, 'disk'));
    t.apply(ev(2000, 'report'));
    expect(t.current).toBe(first);
    expect(first.started).toBe(2000);
    expect(first.stageCount).toBe(1);
    expect(first.worker).toBeUndefined();
    expect(outcomeOf(first, true, 2001, STUCK)).toBe('in_progress');
    expect(t.sessions.map((s, i, all) => [s.started, s.stageCount, outcomeOf(s, i === all.length - 1, 2001, STUCK)])).toEqual([
      [1000, 3, 'booted'],
      [2000, 1, 'in_progress'],
    ]);
    // A refused answer is a failure: that boot stays an object in the arena, the next gets its own.
    t.apply(ev(2001, 'vars', { answer: 'refused', reason: 'no disk' }));
    const failed = t.current!;
    expect(failed.failure).toBeDefined();
    t.apply(ev(3000, 'report'));
    expect(t.current).not.toBe(failed);
    expect(failed.started).toBe(2000);
    expect(failed.failure?.reason).toBe('no disk');
    expect(t.current!.failure).toBeUndefined();
    expect(t.sessions.map((s) => [s.started, s.stageCount, !!s.failure])).toEqual([
      [1000, 3, false],
      [2000, 2, true],
      [3000, 1, false],
    ]);
  });
});

describe('boot sessions service: loops', () => {
  beforeAll(() => Logger.overrideLogger(false));
  const make = (action: 'hold' | 'keep-looping') => {
    let now = 1_000_000;
    const audits: unknown[] = [];
    const written: BootEvent[][] = [];
    const store = { refuse: null as NodeJS.ErrnoException | null };
    const append = (events: BootEvent[]) => (store.refuse ? Promise.reject(store.refuse) : (written.push(events), Promise.resolve()));
    const repo = { load: () => Promise.resolve([]), append, pull: () => Promise.resolve([]), prune: () => Promise.resolve(), ...NO_SNAPSHOT };
    const settings = { bootPolicy: { loop_threshold: 3, loop_window_minutes: 10, loop_action: action, stuck_after_seconds: 300 } };
    const audit = { record: (op: string, f: unknown) => (audits.push({ op, ...(f as object) }), Promise.resolve()) };
    let onChange: (c: unknown) => void = () => undefined;
    const ledger = { devices: new Map(), onBootChange: (fn: (c: unknown) => void) => (onChange = fn) };
    const svc = new BootSessionsService(repo as never, settings as never, audit as never, { now: () => new Date(now) } as never, { nodeId: 'n1' } as never, ledger as never);
    void svc.onModuleInit();
    const changes: string[] = [];
    svc.onHoldChange((m) => changes.push(m));
    const boot = (answer: string) => {
      now += 1000;
      svc.seen({ mac: MAC, stage: 'report', worker: 'w1' });
      svc.seen({ mac: MAC, stage: 'vars', worker: 'w1', detail: { answer, reason: 'r' } });
    };
    return { svc, audits, changes, boot, written, store, tick: (ms: number) => (now += ms), change: (c: object) => onChange({ full: false, local: true, macs: [], workers: [], hostnames: [], ...c }) };
  };

  it("an operator's release is in the store, after the boots seen before it, when it is answered; a store that refuses it changes nothing", async () => {
    const { svc, audits, boot, written, store } = make('hold');
    for (let i = 0; i < 3; i++) boot('reboot');
    expect(svc.held(MAC)).toBe(true);
    expect(written).toEqual([]); // nothing flushed yet: batches go every 500 ms
    store.refuse = Object.assign(new Error('no space'), { code: 'ENOSPC' });
    await expect(svc.release(MAC, 'op')).rejects.toMatchObject({ status: 507 });
    expect(svc.held(MAC)).toBe(true);
    expect(audits.filter((a) => (a as { op: string }).op === 'device.boot_hold.release')).toEqual([]);
    store.refuse = Object.assign(new Error('read-only'), { code: 'EROFS' });
    await expect(svc.release(MAC, 'op')).rejects.toMatchObject({ status: 503 });
    store.refuse = null;
    expect(await svc.release(MAC, 'op')).toBe(true);
    const stages = written.flat().map((e) => e.stage);
    // The six boot events (kept through the refusals) then the release, which was never queued twice.
    expect(stages).toEqual(['report', 'vars', 'report', 'vars', 'report', 'vars', 'release']);
    expect(svc.held(MAC)).toBe(false);
    expect(audits.filter((a) => (a as { op: string }).op === 'device.boot_hold.release')).toEqual([expect.objectContaining({ mac: MAC, client: 'op' })]);
    await svc.flush();
    expect(written.flat().filter((e) => e.stage === 'release')).toHaveLength(1);
  });

  it('tells the change listeners once when a quiet boot passes stuck_after_seconds, per boot, and not before; a later stage sets a new deadline', async () => {
    const { svc, tick } = make('keep-looping');
    clearInterval((svc as unknown as { timer: NodeJS.Timeout }).timer);
    let changed = 0;
    svc.onChanged(() => changed++);
    const other = '02:00:00:00:00:09';
    svc.seen({ mac: MAC, stage: 'report', worker: 'w1' });
    await svc.flush(); // the report itself
    expect(changed).toBe(1);
    tick(200_000);
    svc.seen({ mac: other, stage: 'report' });
    await svc.flush();
    expect(changed).toBe(2);
    tick(99_000); // MAC's deadline is 1 s away
    await svc.flush();
    expect(changed).toBe(2);
    tick(1000); // MAC's passes, other's not yet
    await svc.flush();
    expect(changed).toBe(3);
    await svc.flush();
    expect(changed).toBe(3);
    // A stage of the other boot moves its deadline: 300 s from it, not from its report.
    svc.seen({ mac: other, stage: 'vars', detail: { answer: 'reboot', reason: 'r' } });
    await svc.flush();
    expect(changed).toBe(4);
    tick(299_000);
    await svc.flush();
    expect(changed).toBe(4);
    tick(1000);
    await svc.flush();
    expect(changed).toBe(5);
    tick(1_000_000);
    await svc.flush();
    expect(changed).toBe(5);
  });

  it('writes pending events at once past 2,000 (events of a storm die young), one batch at a time, and not again after a refusal until a flush writes', async () => {
    const { svc, written, store, tick } = make('keep-looping');
    // Only the flushes this test makes (the 500 ms timer would tell the listeners on its own schedule).
    clearInterval((svc as unknown as { timer: NodeJS.Timeout }).timer);
    const seat = (i: number) => `02:00:00:01:${(i >> 8).toString(16).padStart(2, '0')}:${(i & 255).toString(16).padStart(2, '0')}`;
    let changed = 0;
    svc.onChanged(() => changed++);
    for (let i = 0; i < 1999; i++) svc.seen({ mac: seat(i), stage: 'report', worker: `w${i}` });
    expect(written).toEqual([]);
    svc.seen({ mac: seat(1999), stage: 'report', worker: 'w1999' });
    // The 2,000th event starts the write; those seen while it runs wait for the next one.
    for (let i = 0; i < 2500; i++) svc.seen({ mac: seat(2000 + i), stage: 'report', worker: `w${2000 + i}` });
    await new Promise((r) => setImmediate(r));
    expect(written.map((b) => b.length)).toEqual([2000]);
    expect(written[0].map((e) => e.mac)).toEqual(Array.from({ length: 2000 }, (_, i) => seat(i)));
    svc.seen({ mac: seat(4500), stage: 'report', worker: 'w4500' });
    await new Promise((r) => setImmediate(r));
    expect(written.map((b) => b.length)).toEqual([2000, 2501]);
    // The flush tells its listeners of what was written early, though it had nothing left to write.
    expect(changed).toBe(0);
    await svc.flush();
    expect(changed).toBe(1);
    // A store that refuses an early write keeps the events, and is not asked again per event.
    store.refuse = Object.assign(new Error('no space'), { code: 'ENOSPC' });
    tick(1000);
    for (let i = 0; i < 5000; i++) svc.seen({ mac: seat(i), stage: 'report', worker: `w${i}` });
    await new Promise((r) => setImmediate(r));
    const batches = () => written.map((b) => b.length).filter((n) => n > 0);
    expect(batches()).toEqual([2000, 2501]);
    store.refuse = null;
    await svc.flush();
    expect(batches()).toEqual([2000, 2501, 5000]);
    expect(new Set(written[written.length - 1].map((e) => e.mac)).size).toBe(5000);
    // Writing again, early writes resume.
    tick(1000);
    for (let i = 0; i < 2000; i++) svc.seen({ mac: seat(i), stage: 'report', worker: `w${i}` });
    await new Promise((r) => setImmediate(r));
    expect(batches()).toEqual([2000, 2501, 5000, 2000]);
    // Shutting down, the last snapshot takes what is pending itself: no early write beside it.
    await svc.beforeApplicationShutdown();
    tick(1000);
    for (let i = 0; i < 2000; i++) svc.seen({ mac: seat(i), stage: 'report', worker: `w${i}` });
    await new Promise((r) => setImmediate(r));
    expect(batches()).toEqual([2000, 2501, 5000, 2000]);
  });

  it('marks a device looping at the third failed boot, audits once, holds it, and a release clears it', async () => {
    const { svc, audits, changes, boot } = make('hold');
    boot('reboot');
    boot('reboot');
    expect(svc.held(MAC)).toBe(false);
    boot('reboot');
    expect(svc.held(MAC)).toBe(true);
    expect(changes).toEqual([MAC]);
    boot('held');
    boot('held');
    expect(audits.filter((a) => (a as { op: string }).op === 'device.boot_loop')).toHaveLength(1);
    expect(await svc.release(MAC, 'op')).toBe(true);
    expect(svc.held(MAC)).toBe(false);
    expect(changes).toEqual([MAC, MAC]);
    expect(await svc.release(MAC, 'op')).toBe(false);
    boot('reboot');
    expect(svc.looping(MAC)).toBeNull();
  });

  it("a change of what the looping device boots (its binding, its worker) lifts the hold; another's, or another control plane's, does not", async () => {
    const { svc, boot, change, audits } = make('hold');
    for (let i = 0; i < 3; i++) boot('reboot');
    expect(svc.held(MAC)).toBe(true);
    change({ workers: ['other'] });
    change({ macs: ['02:00:00:00:00:99'] });
    change({ workers: ['w1'], local: false });
    expect(svc.held(MAC)).toBe(true);
    change({ workers: ['w1'] });
    expect(svc.held(MAC)).toBe(false);
    await new Promise((r) => setImmediate(r));
    expect(audits.filter((a) => (a as { op: string }).op === 'device.boot_hold.release')).toEqual([expect.objectContaining({ mac: MAC, client: 'ledger change' })]);
  });

  it('boots spread wider than the window never make a loop; keep-looping marks without holding; reaching the disk clears it', () => {
    const { svc, boot, tick } = make('keep-looping');
    for (let i = 0; i < 5; i++) {
      boot('reboot');
      tick(6 * 60_000);
    }
    expect(svc.looping(MAC)).toBeNull();
    boot('reboot');
    boot('reboot');
    boot('reboot');
    expect(svc.looping(MAC)).not.toBeNull();
    expect(svc.held(MAC)).toBe(false);
    svc.seen({ mac: MAC, stage: 'report', worker: 'w1' });
    svc.seen({ mac: MAC, stage: 'vars', worker: 'w1', detail: { answer: 'disk', disk: 'iqn.x:w1.u', agent: 'a' } });
    expect(svc.waitingForDisk().map((w) => w.target)).toEqual(['iqn.x:w1.u']);
    svc.seen({ mac: MAC, stage: 'disk', worker: 'w1' });
    expect(svc.looping(MAC)).toBeNull();
    expect(svc.waitingForDisk()).toEqual([]);
  });
});

describe('boot sessions service: pruning to what the timelines hold', () => {
  beforeAll(() => Logger.overrideLogger(false));
  const HEALTHY = '02:00:00:00:00:0a';
  const HELD = '02:00:00:00:00:0b';
  const RELEASED = '02:00:00:00:00:0c';
  const LOOPER = '02:00:00:00:00:0d';
  const settings = { bootPolicy: { loop_threshold: 3, loop_window_minutes: 10, loop_action: 'hold', stuck_after_seconds: 300 } };
  const audit = { record: () => Promise.resolve() };
  const store = { devices: new Map(), onBootChange: () => undefined };
  const service = (clock: { now: () => Date }, stored: BootEvent[], loaded: BootEvent[]) => {
    const repo = { load: (_since: number, apply: (e: BootEvent) => void) => (loaded.forEach(apply), Promise.resolve()), append: (b: BootEvent[]) => (stored.push(...b), Promise.resolve()), pull: () => Promise.resolve([]), prune: () => Promise.resolve(), ...NO_SNAPSHOT };
    return new BootSessionsService(repo as never, settings as never, audit as never, clock as never, { nodeId: 'n1' } as never, store as never);
  };
  const view = (svc: BootSessionsService) => ({
    sessions: svc.query({ limit: 1000 }).map((x) => sessionView(x.session, x.outcome, x.looping)),
    looping: [HEALTHY, HELD, RELEASED, LOOPER].map((m) => [svc.looping(m), svc.held(m)]),
  });

  it('replaying what a prune keeps rebuilds the same sessions, loops and holds, from a fraction of the events', async () => {
    let now = 10_000_000_000;
    const clock = { now: () => new Date(now) };
    const stored: BootEvent[] = [];
    const svc = service(clock, stored, []);
    await svc.onModuleInit();
    const boot = (mac: string, answer: string) => {
      svc.seen({ mac, stage: 'report', worker: 'w1' });
      svc.seen({ mac, stage: 'vars', worker: 'w1', detail: answer === 'disk' ? { answer, disk: 'iqn.x:w1.u', agent: 'a' } : { answer, reason: 'r' } });
      if (answer === 'disk') svc.seen({ mac, stage: 'disk', worker: 'w1', detail: { target: 'iqn.x:w1.u', agent: 'a', initiator: 'i' } });
    };
    // A healthy seat booting every minute; a seat that loops, is held, and is then rebooted by hand
    // every 2 minutes (its held boots push the boots that tipped it out of its timeline); a seat
    // released twice that goes on failing, but slower than the loop window; a seat that fails a
    // boot every 30 s all along (a disk gone: it keeps looping, its answer is not the hold).
    for (let i = 0; i < 25; i++) {
      now += 30_000;
      boot(LOOPER, 'reboot');
      now += 30_000;
      boot(LOOPER, 'reboot');
      boot(HEALTHY, 'disk');
      if (i < 3) boot(RELEASED, 'reboot');
      if (i === 3) await svc.release(RELEASED, 'op');
    }
    for (let i = 0; i < 3; i++) {
      now += 30_000;
      boot(HELD, 'reboot');
      boot(RELEASED, 'reboot');
      boot(RELEASED, 'reboot');
    }
    expect(svc.held(HELD)).toBe(true);
    expect(await svc.release(RELEASED, 'op')).toBe(true);
    for (let i = 0; i < 15; i++) {
      now += 2 * 60_000;
      boot(LOOPER, 'reboot');
      boot(HELD, 'held');
      if (i % 6 === 0) boot(RELEASED, 'reboot');
    }
    now += 11 * 60_000;
    boot(RELEASED, 'reboot');
    await svc.flush();
    expect(svc.held(HELD)).toBe(true);
    expect(svc.looping(LOOPER)).not.toBeNull();

    const kept = keptByPrune(stored, svc.pruneSpec(now));
    expect(kept.length).toBeLessThan(stored.length * 0.75);
    expect(kept.filter((e) => e.stage === 'release')).toHaveLength(1);
    // The looper's 65 boots: its loop window before the detection and its last 10 boots, with margins.
    expect(stored.filter((e) => e.mac === LOOPER)).toHaveLength(130);
    expect(kept.filter((e) => e.mac === LOOPER).length).toBeLessThan(70);
    // What the timelines hold, plus at most the margin's worth of a device's earlier boots.
    const held = svc.pruneSpec(now).held;
    expect(kept.length).toBeGreaterThanOrEqual(held);

    const full = service(clock, [], stored);
    await full.onModuleInit();
    const pruned = service(clock, [], kept);
    await pruned.onModuleInit();
    expect(view(pruned)).toEqual(view(full));
    expect(view(pruned)).toEqual(view(svc));
    expect(pruned.held(HELD)).toBe(true);
    await Promise.all([svc, full, pruned].map((x) => x.beforeApplicationShutdown()));
  });

  it('prunes 5 minutes after start, then every IPXE_CP_BOOT_EVENT_PRUNE_SECONDS, with the timelines of that moment', async () => {
    let now = 10_000_000_000;
    const prunes: { at: number; before: number; macs: string[] }[] = [];
    const repo = {
      load: (_since: number, apply: (e: BootEvent) => void) => (apply(ev(now - 1000, 'report')), Promise.resolve()),
      append: () => Promise.resolve(),
      pull: () => Promise.resolve([]),
      ...NO_SNAPSHOT,
      prune: (p: { before: number; cuts: Map<string, unknown> }) => (prunes.push({ at: now, before: p.before, macs: [...p.cuts.keys()] }), Promise.resolve()),
    };
    const svc = new BootSessionsService(repo as never, settings as never, audit as never, { now: () => new Date(now) } as never, { nodeId: 'n1', bootEventPruneSeconds: 3600 } as never, store as never);
    await svc.onModuleInit();
    const t0 = now;
    for (const at of [299_000, 300_000, 301_000, 3_899_000, 3_900_000]) {
      now = t0 + at;
      await svc.flush();
    }
    expect(prunes).toEqual([300_000, 3_900_000].map((at) => ({ at: t0 + at, before: t0 + at - 7 * 86_400_000, macs: [MAC] })));
    await svc.beforeApplicationShutdown();
  });

  it('nothing within five minutes of now goes, however old the timelines say it is (other control planes may still be sending it)', async () => {
    const now = 10_000_000_000;
    const svc = service({ now: () => new Date(now) }, [], [ev(now - 60_000, 'vars', { answer: 'reboot' }), ev(now - 400_000, 'vars', { answer: 'reboot' })]);
    await svc.onModuleInit();
    const spec = svc.pruneSpec(now);
    expect(spec.cuts.get(MAC)).toEqual({ before: now - 300_000 });
    expect(keptByPrune([ev(now - 60_000, 'vars'), ev(now - 400_000, 'vars'), ev(now - 8 * 86_400_000, 'release')], spec)).toEqual([ev(now - 60_000, 'vars')]);
    await svc.beforeApplicationShutdown();
  });
});

describe('boot sessions service: the snapshot a clean shutdown leaves', () => {
  beforeAll(() => Logger.overrideLogger(false));
  const dir = tempDir('kurrent-boot-snapshot-');
  afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));
  const settings = { bootPolicy: { loop_threshold: 3, loop_window_minutes: 10, loop_action: 'hold', stuck_after_seconds: 300 } };
  const audit = { record: () => Promise.resolve() };
  const store = { devices: new Map(), onBootChange: () => undefined };
  let now = 10_000_000_000;
  const clock = { now: () => new Date(now) };
  /** A control plane on the state directory, and how many stored events its start read. */
  const controlPlane = (node: string) => {
    const config = { stateDir: dir, nodeId: node, bootEventPruneSeconds: 3600 } as AppConfig;
    const repo = new FileBootEventRepository(config, new FileSystem(), new BootSnapshotFile(config, new FileSystem()));
    const read = { events: 0 };
    const load = repo.load.bind(repo);
    repo.load = (since, apply) => load(since, (e) => (read.events++, apply(e)));
    return { svc: new BootSessionsService(repo, settings as never, audit as never, clock as never, config, store as never), read };
  };
  const view = (svc: BootSessionsService) => ({
    sessions: svc.query({ limit: 1000 }).map((x) => sessionView(x.session, x.outcome, x.looping)),
    looping: ['02:00:00:00:00:0a', '02:00:00:00:00:0b', '02:00:00:00:00:0c'].map((m) => [svc.looping(m), svc.held(m)]),
  });
  const snapshot = path.join(dir, 'boot-timelines.snapshot');

  it('the next start reads the timelines and only the events after them, and sees what a replay of every event sees', async () => {
    const a = controlPlane('n1').svc;
    await a.onModuleInit();
    const boot = (svc: BootSessionsService, mac: string, answer: string) => {
      svc.seen({ mac, stage: 'report', worker: 'w1' });
      svc.seen({ mac, stage: 'vars', worker: 'w1', detail: answer === 'disk' ? { answer, disk: 'iqn.x:w1.u', agent: 'a' } : { answer, reason: 'r' } });
      if (answer === 'disk') svc.seen({ mac, stage: 'disk', worker: 'w1', detail: { target: 'iqn.x:w1.u', agent: 'a', initiator: 'i' } });
    };
    for (let i = 0; i < 12; i++) {
      now += 30_000;
      boot(a, '02:00:00:00:00:0a', 'disk');
      boot(a, '02:00:00:00:00:0b', 'reboot');
      if (i < 4) boot(a, '02:00:00:00:00:0c', 'reboot');
      if (i === 5) await a.release('02:00:00:00:00:0c', 'op');
    }
    // One boot left in progress: its stuck deadline comes back too.
    a.seen({ mac: '02:00:00:00:00:0a', stage: 'report', worker: 'w1' });
    expect(a.held('02:00:00:00:00:0b')).toBe(true);
    const before = view(a);
    await a.beforeApplicationShutdown();
    expect(fs.existsSync(snapshot)).toBe(true);

    // Another control plane's events after the shutdown (PostgreSQL's case; the file stands in for it).
    const tail = new FileBootEventRepository({ stateDir: dir } as AppConfig, new FileSystem(), new BootSnapshotFile({ stateDir: dir } as AppConfig, new FileSystem()));
    await tail.load(0, () => undefined);
    now += 1000;
    await tail.append([{ at: now, mac: '02:00:00:00:00:0c', stage: 'report', node: 'n2', worker: 'w1' }]);

    const b = controlPlane('n1');
    await b.svc.onModuleInit();
    expect([b.read.events, b.svc.startedFrom]).toEqual([1, 'snapshot']);
    expect(fs.existsSync(snapshot)).toBe(false);
    const replay = controlPlane('n1');
    await replay.svc.onModuleInit();
    expect(replay.read.events).toBe(fs.readFileSync(path.join(dir, 'boot-events.jsonl'), 'utf8').split('\n').length - 1);
    expect(view(b.svc)).toEqual(view(replay.svc));
    expect(view(b.svc).sessions.filter((x) => x.started_at !== new Date(now).toISOString())).toEqual(before.sessions);
    Object.assign(replay.svc, { loaded: false }); // it leaves no snapshot of its own
    await replay.svc.beforeApplicationShutdown();
    // The boot left in progress turns stuck after the quiet period, in both.
    now += STUCK + 1000;
    expect(b.svc.latest('02:00:00:00:00:0a')?.outcome).toBe('stuck');
    expect(b.svc.held('02:00:00:00:00:0b')).toBe(true);

    // It goes on from there: a release, more boots, a second restart.
    await b.svc.release('02:00:00:00:00:0b', 'op');
    boot(b.svc, '02:00:00:00:00:0b', 'disk');
    const again = view(b.svc);
    await b.svc.beforeApplicationShutdown();
    const c = controlPlane('n1');
    await c.svc.onModuleInit();
    expect([c.read.events, c.svc.startedFrom]).toEqual([0, 'snapshot']);
    expect(view(c.svc)).toEqual(again);
    await c.svc.beforeApplicationShutdown();
  });

  it('a snapshot the store no longer fits (a prune rewrote the file), one older than the retention, or a torn one is not used: the events are replayed', async () => {
    now += 60_000;
    const a = controlPlane('n1');
    await a.svc.onModuleInit();
    a.svc.seen({ mac: '02:00:00:00:00:0a', stage: 'report', worker: 'w1' });
    const want = view(a.svc);
    await a.svc.beforeApplicationShutdown();
    const file = path.join(dir, 'boot-events.jsonl');
    const events = fs.readFileSync(file, 'utf8');
    const whole = fs.readFileSync(snapshot, 'utf8');
    const spoil: [string, () => void][] = [
      ['rewritten', () => fs.writeFileSync(file, events.split('\n').slice(1).join('\n'))],
      ['older than the retention', () => (now += 7 * 86_400_000 + 1)],
      ['torn', () => fs.writeFileSync(snapshot, whole.slice(0, -20))],
      ['not ours', () => fs.writeFileSync(snapshot, 'hello\n' + whole)],
    ];
    for (const [why, act] of spoil) {
      fs.writeFileSync(file, events);
      fs.writeFileSync(snapshot, whole);
      const t0 = now;
      act();
      const b = controlPlane('n1');
      await b.svc.onModuleInit();
      expect([why, fs.existsSync(snapshot), b.svc.startedFrom]).toEqual([why, false, 'events']);
      // Older than the retention: so are its events, and nothing is left.
      if (why === 'older than the retention') expect(view(b.svc).sessions).toEqual([]);
      else expect([why, b.read.events > 0]).toEqual([why, true]);
      if (why === 'torn' || why === 'not ours') expect(view(b.svc)).toEqual(want);
      Object.assign(b.svc, { loaded: false });
      await b.svc.beforeApplicationShutdown();
      now = t0;
    }
  });
});

describe('boot sessions service: the snapshot each prune leaves, for a start after a crash', () => {
  beforeAll(() => Logger.overrideLogger(false));
  const dir = tempDir('kurrent-boot-snapshot-crash-');
  afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));
  const settings = { bootPolicy: { loop_threshold: 3, loop_window_minutes: 10, loop_action: 'hold', stuck_after_seconds: 300 } };
  let now = 10_000_000_000;
  const clock = { now: () => new Date(now) };
  const controlPlane = () => {
    const config = { stateDir: dir, nodeId: 'n1', bootEventPruneSeconds: 3600 } as AppConfig;
    const repo = new FileBootEventRepository(config, new FileSystem(), new BootSnapshotFile(config, new FileSystem()));
    const read = { events: 0 };
    const load = repo.load.bind(repo);
    repo.load = (since, apply) => load(since, (e) => (read.events++, apply(e)));
    const svc = new BootSessionsService(repo, settings as never, { record: () => Promise.resolve() } as never, clock as never, config, { devices: new Map(), onBootChange: () => undefined } as never);
    return { svc, repo, read };
  };
  const mac = (i: number) => `02:00:00:00:${((i >> 8) & 255).toString(16).padStart(2, '0')}:${(i & 255).toString(16).padStart(2, '0')}`;
  const boot = (svc: BootSessionsService, m: string, answer: 'disk' | 'reboot') => {
    svc.seen({ mac: m, stage: 'report', worker: 'w1' });
    svc.seen({ mac: m, stage: 'vars', worker: 'w1', detail: answer === 'disk' ? { answer, disk: 'iqn.x:w1.u', agent: 'a' } : { answer, reason: 'r' } });
    if (answer === 'disk') svc.seen({ mac: m, stage: 'disk', worker: 'w1', detail: { target: 'iqn.x:w1.u', agent: 'a', initiator: 'i' } });
  };
  const view = (svc: BootSessionsService) => svc.query({ limit: 10_000 }).map((x) => sessionView(x.session, x.outcome, x.looping));
  /** A fresh store, 1,500 booted devices flushed, and each write of the next snapshot's lines passed through `onAdd` (its count from 1). */
  const fleetWithSnapshotWrites = async (onAdd: (n: number, lines: readonly string[], add: (lines: readonly string[]) => Promise<void>) => Promise<void>) => {
    fs.rmSync(path.join(dir, 'boot-events.jsonl'), { force: true });
    const a = controlPlane();
    await a.svc.onModuleInit();
    for (let i = 0; i < 1500; i++) boot(a.svc, mac(i), 'disk');
    await a.svc.flush();
    const open = a.repo.openSnapshot.bind(a.repo);
    a.repo.openSnapshot = async (at, node) => {
      const w = await open(at, node);
      const add = w.add.bind(w);
      let n = 0;
      w.add = (lines) => onAdd(++n, lines, add);
      return w;
    };
    return a;
  };

  it('boots seen while it is written are in it or after it, never lost or counted twice; the writer\'s own events after it are read', async () => {
    const a = controlPlane();
    await a.svc.onModuleInit();
    // 2,500 timelines: the snapshot is written in three slices, with boots between them.
    for (let i = 0; i < 2500; i++) boot(a.svc, mac(i), 'disk');
    await a.svc.flush();
    const open = a.repo.openSnapshot.bind(a.repo);
    let slices = 0;
    a.repo.openSnapshot = async (at, node) => {
      const w = await open(at, node);
      const add = w.add.bind(w);
      w.add = (lines) => {
        // After the first slice: a boot of a device already written, and of one seen for the first time.
        if (++slices === 1) {
          now += 1000;
          boot(a.svc, mac(5), 'reboot');
          boot(a.svc, mac(9999), 'reboot');
        }
        return add(lines);
      };
      return w;
    };
    // The first prune comes 5 minutes after start; the snapshot follows it.
    now += 5 * 60_000;
    await a.svc.flush();
    expect([a.svc.snapshotsWritten, slices]).toEqual([1, 3]);
    // After it: boots of the writer itself, then a crash (no shutdown: no snapshot of it).
    now += 1000;
    boot(a.svc, mac(7), 'reboot');
    boot(a.svc, mac(10_000), 'disk');
    await a.svc.flush();
    const want = view(a.svc);
    expect(want.filter((x) => [mac(5), mac(9999), mac(7), mac(10_000)].includes(x.mac))).toHaveLength(6);
    Object.assign(a.svc, { loaded: false });
    await a.svc.beforeApplicationShutdown();

    const b = controlPlane();
    await b.svc.onModuleInit();
    // Only the 5 events after the snapshot are read; the 2,500 boots and those seen while it was written are in it.
    expect([b.svc.startedFrom, b.read.events]).toEqual(['snapshot', 5]);
    expect(view(b.svc)).toEqual(want);
    Object.assign(b.svc, { loaded: false });
    await b.svc.beforeApplicationShutdown();
    const replay = controlPlane();
    await replay.svc.onModuleInit();
    expect([replay.svc.startedFrom, replay.read.events]).toEqual(['events', 2500 * 3 + 2 + 2 + 2 + 3]);
    expect(view(replay.svc)).toEqual(want);
    Object.assign(replay.svc, { loaded: false });
    await replay.svc.beforeApplicationShutdown();
  });

  it('a store that fails the events seen while it was written leaves no snapshot, and keeps the events for the next flush', async () => {
    // Seen after the first slice, so still to be appended when the lines are done.
    const a = await fleetWithSnapshotWrites((n, lines, add) => (n === 1 && boot(a.svc, mac(1500), 'reboot'), add(lines)));
    const append = a.repo.append.bind(a.repo);
    let fail = true;
    a.repo.append = (events) => (fail && events.length ? Promise.reject(new Error('disk full')) : append(events));
    now += 5 * 60_000;
    await a.svc.flush();
    expect([a.svc.snapshotsWritten, fs.existsSync(path.join(dir, 'boot-timelines.snapshot')), fs.readdirSync(dir).filter((n) => n.endsWith('.tmp'))]).toEqual([0, false, []]);
    fail = false;
    await a.svc.flush();
    const lines = fs.readFileSync(path.join(dir, 'boot-events.jsonl'), 'utf8').trim().split('\n').map((l) => JSON.parse(l).mac);
    expect([lines.length, lines.slice(-3)]).toEqual([1500 * 3 + 2, [mac(1499), mac(1500), mac(1500)]]);
    Object.assign(a.svc, { loaded: false });
    await a.svc.beforeApplicationShutdown();
  });

  it('a snapshot file that cannot be written costs no event: those seen while it was written are appended all the same', async () => {
    // The first slice goes, a boot arrives, then the disk is full.
    const a = await fleetWithSnapshotWrites((n, lines, add) => (n === 1 ? (boot(a.svc, mac(1500), 'reboot'), add(lines)) : Promise.reject(new Error('ENOSPC'))));
    now += 5 * 60_000;
    await a.svc.flush();
    expect([a.svc.snapshotsWritten, fs.existsSync(path.join(dir, 'boot-timelines.snapshot'))]).toEqual([0, false]);
    const lines = fs.readFileSync(path.join(dir, 'boot-events.jsonl'), 'utf8').trim().split('\n').map((l) => JSON.parse(l).mac);
    expect([lines.length, lines.slice(-2)]).toEqual([1500 * 3 + 2, [mac(1500), mac(1500)]]);
    Object.assign(a.svc, { loaded: false });
    await a.svc.beforeApplicationShutdown();
  });
});

describe('stgt sessions: the I_T nexuses of tgtadm --op show', () => {
  it('lists each initiator with its nexus id and address, per target', () => {
    const out = [
      'Target 1: iqn.2026-07.com.k:w1.ubuntu',
      '    System information:',
      '        Driver: iscsi',
      '        State: ready',
      '    I_T nexus information:',
      '        I_T nexus: 3',
      '            Initiator: iqn.2010-04.org.ipxe:w1 alias: none',
      '            Connection: 0',
      '                IP Address: 10.0.0.21',
      '        I_T nexus: 4',
      '            Initiator: iqn.2010-04.org.ipxe:w1 alias: none',
      '            Connection: 0',
      '                IP Address: 10.0.0.21',
      '    LUN information:',
      '        LUN: 0',
      '            Type: controller',
      'Target 2: iqn.2026-07.com.k:w2.ubuntu',
      '    System information:',
      '    I_T nexus information:',
      '    LUN information:',
      '        LUN: 1',
      '            Backing store path: /d/w2.img',
    ].join('\n');
    expect(parseSessions(out)).toEqual([
      { target: 'iqn.2026-07.com.k:w1.ubuntu', initiator: 'iqn.2010-04.org.ipxe:w1', address: '10.0.0.21', id: '3' },
      { target: 'iqn.2026-07.com.k:w1.ubuntu', initiator: 'iqn.2010-04.org.ipxe:w1', address: '10.0.0.21', id: '4' },
    ]);
  });
});

describe('the hold script', () => {
  it('says why and where, with nothing from the reason that iPXE would expand or run', () => {
    const s = renderHold(MAC, '3 boots ${evil}\nchain http://x/ never reached');
    expect(s.split('\n').filter((l) => l.startsWith('echo Kurrent holds'))).toEqual([`echo Kurrent holds this machine (${MAC}): 3 boots   evil  chain http://x/ never reached`]);
    expect(s).not.toMatch(/\$\{evil/);
    expect(s.split('\n').filter((l) => /^(chain|imgfetch|sanboot|shell)/.test(l))).toEqual([]);
    expect(s.endsWith('reboot\n')).toBe(true);
  });
});
