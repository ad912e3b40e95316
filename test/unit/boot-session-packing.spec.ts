import fc from 'fast-check';
import { BOOT_STAGES, BootEvent, BootStage } from '../../src/control-plane/repositories/boot-events/boot-event.repository';
import { BootTimeline, countsTowardsLoop, outcomeOf, STAGE_ORDER, stoppedAt } from '../../src/control-plane/boots/boot-timeline';
import { SessionArena } from '../../src/control-plane/boots/session-arena';

/**
 * BootSession is packed (stages as integers in fields, issue 27). This is the rule it packs,
 * written plainly (one object a stage, as the timeline kept them before): both must give the
 * same sessions for any sequence of events.
 */
interface PlainSession {
  worker?: string;
  started: number;
  stages: { stage: BootStage; at: number; detail?: Record<string, string> }[];
  reached: number;
  last: number;
  failure?: { stage: BootStage; reason: string; answer: string };
  waiting?: boolean;
  held?: boolean;
}

class PlainTimeline {
  sessions: PlainSession[] = [];
  constructor(private readonly keep: number) {}
  apply(e: BootEvent): void {
    if (e.stage === 'release') return;
    let s: PlainSession;
    if (e.stage === 'report') {
      const prev = this.sessions[this.sessions.length - 1];
      const at = prev && e.at <= prev.started ? prev.started + 1 : e.at;
      s = { started: at, stages: [], reached: 0, last: at, ...(e.worker ? { worker: e.worker } : {}) };
      this.sessions = [...this.sessions, s].slice(-this.keep);
      e = { ...e, at };
    } else {
      const cur = this.sessions[this.sessions.length - 1];
      if (!cur || (STAGE_ORDER[e.stage] < STAGE_ORDER.disk && cur.reached >= STAGE_ORDER.disk) || cur.stages.some((m) => m.stage === e.stage)) return;
      s = cur;
    }
    const stage = e.stage as BootStage;
    const at = Math.max(e.at, s.started);
    s.stages.push(e.detail ? { stage, at, detail: e.detail } : { stage, at });
    s.reached = Math.max(s.reached, STAGE_ORDER[stage]);
    s.last = Math.max(s.last, at);
    if (e.worker && !s.worker) s.worker = e.worker;
    if (stage !== 'vars') return;
    const answer = e.detail?.answer;
    if (answer === 'held') s.held = true;
    else if (answer === 'pooled') s.waiting = true;
    else if (answer && answer !== 'disk' && answer !== 'item') s.failure = { stage: 'vars', reason: e.detail?.reason ?? answer, answer };
  }
}

const MAC = '02:00:00:00:00:01';
const ANSWERS = ['disk', 'item', 'reboot', 'pooled', 'empty', 'refused', 'denied', 'held'];
// Times from the epoch's ms to past 2^31 ms (24.8 days) and 2^50 apart: the packed stage code
// must stay exact where it no longer is a small integer.
const gap = fc.oneof(fc.integer({ min: -5, max: 2_000 }), fc.constantFrom(3 * 86_400_000, 2 ** 31 + 7, 2 ** 44));
const detail = fc.option(
  fc.record({ answer: fc.constantFrom(...ANSWERS), reason: fc.constantFrom('r1', 'r2'), disk: fc.constantFrom('iqn.x:w1.u', 'iqn.x:w2.u') }, { requiredKeys: ['answer'] }),
  { nil: undefined },
);
const event = fc.record({
  stage: fc.constantFrom<BootEvent['stage']>(...BOOT_STAGES, 'report', 'report', 'release'),
  gap,
  worker: fc.option(fc.constantFrom('w1', 'w2', ''), { nil: undefined }),
  detail,
});

describe('BootSession packing', () => {
  it('gives the sessions of the plain rule for any sequence of events (stages, times, details, outcome fields)', () => {
    fc.assert(
      fc.property(fc.array(event, { maxLength: 40 }), fc.integer({ min: 1, max: 4 }), (events, keep) => {
        const packed = new BootTimeline(MAC, keep);
        const plain = new PlainTimeline(keep);
        let at = 1_764_800_000_000;
        for (const x of events) {
          at += x.gap;
          const e: BootEvent = { at, mac: MAC, stage: x.stage, node: 'n1', ...(x.worker !== undefined ? { worker: x.worker } : {}), ...(x.detail ? { detail: { ...x.detail } } : {}) };
          for (const st of BOOT_STAGES) expect(packed.accepts(st)).toBe(st === 'report' || !!plain.sessions.length && !(STAGE_ORDER[st] < STAGE_ORDER.disk && plain.sessions[plain.sessions.length - 1].reached >= STAGE_ORDER.disk) && !plain.sessions[plain.sessions.length - 1].stages.some((m) => m.stage === st));
          packed.apply(e);
          plain.apply(e);
          const view = packed.sessions.map((s) => ({ started: s.started, stages: s.stages, reached: s.reached, last: s.last, worker: s.worker, failure: s.failure, waiting: s.waiting || undefined, held: s.held || undefined }));
          expect(view).toEqual(plain.sessions.map((s) => ({ ...s, worker: s.worker, failure: s.failure, waiting: s.waiting, held: s.held })));
          packed.sessions.forEach((s, i) => {
            expect(s.stageCount).toBe(plain.sessions[i].stages.length);
            expect(stoppedAt(s)).toBe(plain.sessions[i].failure?.stage ?? BOOT_STAGES[plain.sessions[i].reached]);
            expect(countsTowardsLoop(s)).toBe(plain.sessions[i].failure ? plain.sessions[i].failure!.answer !== 'denied' : !plain.sessions[i].stages.some((m) => m.stage === 'vars'));
            expect(outcomeOf(s, i === packed.sessions.length - 1, at, 300_000)).toBeDefined();
          });
        }
      }),
      { numRuns: 1000 },
    );
  });

  it('a snapshot line restores the same timeline, which goes on the same way (sessions, details shared, counted, loop and release)', () => {
    fc.assert(
      fc.property(fc.array(event, { maxLength: 40 }), fc.integer({ min: 1, max: 4 }), fc.nat(40), (events, keep, cut) => {
        const live = new BootTimeline(MAC, keep);
        let restored: BootTimeline | null = null;
        let at = 1_764_800_000_000;
        events.forEach((x, i) => {
          at += x.gap;
          const e: BootEvent = { at, mac: MAC, stage: x.stage, node: 'n1', ...(x.worker !== undefined ? { worker: x.worker } : {}), ...(x.detail ? { detail: { ...x.detail } } : {}) };
          for (const t of restored ? [live, restored] : [live]) {
            t.apply(e);
            // What the service does besides: count outcomes, mark loops.
            if (x.gap % 5 === 0) t.current?.countOnce();
            if (x.gap % 7 === 0) t.looping = t.looping ? null : { since: at, reason: `r${i}` };
          }
          const line = live.snapshot();
          const copy = BootTimeline.restore(line, keep);
          expect(copy.snapshot()).toBe(line);
          expect(copy.sessions.map((s) => [s.mac, s.started, s.stages, s.worker, s.failure, s.reached, s.last, s.held, s.waiting])).toEqual(
            live.sessions.map((s) => [s.mac, s.started, s.stages, s.worker, s.failure, s.reached, s.last, s.held, s.waiting]),
          );
          expect([copy.looping, copy.releasedAt]).toEqual([live.looping, live.releasedAt]);
          // Restored part-way, it follows the live one event for event.
          if (i === cut) restored = copy;
          if (restored) expect(restored.snapshot()).toBe(line);
        });
      }),
      { numRuns: 1000 },
    );
  });

  it('a snapshot line keeps only the newest `keep` sessions, and one that snapshot() cannot have written is refused', () => {
    const t = new BootTimeline(MAC, 10);
    for (let i = 0; i < 6; i++) {
      t.apply({ at: 1000 * i, mac: MAC, stage: 'report', node: 'n1', worker: 'w1' });
      t.apply({ at: 1000 * i + 5, mac: MAC, stage: 'vars', node: 'n1', detail: { answer: 'disk', disk: 'iqn.x:w1' } });
    }
    const line = t.snapshot();
    const three = BootTimeline.restore(line, 3);
    expect(three.sessions.map((s) => s.started)).toEqual([3000, 4000, 5000]);
    expect(three.sessions[1].detailOf('vars')).toBe(three.sessions[0].detailOf('vars'));
    expect(three.sessions[1].worker).toBe('w1');
    const row = JSON.parse(line) as unknown[];
    const bad: [string, unknown[]][] = [
      ['not JSON', []],
      ['a MAC that is a number', [1, ...row.slice(1)]],
      ['a detail that is not strings', [...row.slice(0, 3), [{ answer: 1 }], ...row.slice(4)]],
      ['a stage past os', [...row.slice(0, 4), [0, 'w1', 0, 0, null, 6, -1]]],
      ['a detail index out of range', [...row.slice(0, 4), [0, 'w1', 0, 0, null, 0, 1]]],
      ['a negative start', [...row.slice(0, 4), [-1, 'w1', 0, 0, null, 0, -1]]],
      ['sessions out of order', [...row.slice(0, 4), row[5], row[4]]],
      ['a bad failure', [...row.slice(0, 4), [0, 'w1', 0, 0, ['vars', 'r'], 0, -1]]],
    ];
    const accepted = bad.filter(([why, r]) => {
      try {
        BootTimeline.restore(why === 'not JSON' ? line.slice(0, -1) : JSON.stringify(r), 10);
        return true;
      } catch {
        return false;
      }
    });
    expect(accepted.map(([why]) => why)).toEqual([]);
    expect(BootTimeline.restore(JSON.stringify(row), 10).snapshot()).toBe(line);
  });

  it("keeps one detail object for a device's repeated boots, a new one when it differs; counts a session once", () => {
    const t = new BootTimeline(MAC, 10);
    const worker = () => ['seat', '0001'].join('-');
    for (let i = 0; i < 3; i++) {
      t.apply({ at: 1000 * i, mac: MAC, stage: 'report', node: 'n1', worker: worker() });
      t.apply({ at: 1000 * i + 5, mac: MAC, stage: 'vars', node: 'n1', worker: worker(), detail: { answer: 'disk', disk: `iqn.x:${worker()}` } });
    }
    t.apply({ at: 5000, mac: MAC, stage: 'report', node: 'n1', worker: worker() });
    t.apply({ at: 5005, mac: MAC, stage: 'vars', node: 'n1', detail: { answer: 'disk', disk: 'iqn.x:other' } });
    const [a, b, c, d] = t.sessions;
    expect([a, b, c, d].map((s) => s.worker)).toEqual(['seat-0001', 'seat-0001', 'seat-0001', 'seat-0001']);
    expect(b.detailOf('vars')).toBe(a.detailOf('vars'));
    expect(c.detailOf('vars')).toBe(a.detailOf('vars'));
    expect(d.detailOf('vars')).toEqual({ answer: 'disk', disk: 'iqn.x:other' });
    expect(d.detailOf('vars')).not.toBe(a.detailOf('vars'));
    expect([a.countOnce(), a.countOnce(), b.countOnce()]).toEqual([true, false, true]);
  });
});

describe('SessionArena: the closed boots of every timeline', () => {
  const boot = (t: BootTimeline, at: number, worker: string, answer = 'disk') => {
    t.apply({ at, mac: t.mac, stage: 'report', node: 'n1', worker });
    t.apply({ at: at + 5, mac: t.mac, stage: 'vars', node: 'n1', worker, detail: { answer, disk: `iqn.x:${worker}` } });
    t.apply({ at: at + 9, mac: t.mac, stage: 'disk', node: 'n1', worker });
  };

  it('holds keep - 1 slots a device, reuses the slots it drops, and shares one worker and one detail across a device’s boots', () => {
    const arena = new SessionArena();
    const a = new BootTimeline('02:00:00:00:00:0a', 10, arena);
    const b = new BootTimeline('02:00:00:00:00:0b', 3, arena);
    for (let i = 0; i < 50; i++) {
      boot(a, 1000 * i, 'seat-a');
      boot(b, 1000 * i, 'seat-b');
    }
    expect([a.sessionCount, b.sessionCount, arena.size]).toEqual([10, 3, 9 + 2]);
    // seat-a, its vars detail; seat-b, its vars detail.
    expect(arena.shared).toBe(4);
    expect(a.sessions.map((s) => s.started)).toEqual(Array.from({ length: 10 }, (_, i) => 1000 * (40 + i)));
    expect(new Set(a.sessions.map((s) => s.detailOf('vars'))).size).toBe(1);
    expect(a.sessions.map((s) => s.stages.map((m) => m.stage).join())).toEqual(Array(10).fill('report,vars,disk'));
    // A worker that changes: the old one's string and detail leave the arena with its last boot.
    for (let i = 50; i < 53; i++) boot(b, 1000 * i, 'seat-c');
    expect(b.sessions.map((s) => s.worker)).toEqual(['seat-c', 'seat-c', 'seat-c']);
    expect(arena.shared).toBe(4);
    a.dispose();
    b.dispose();
    expect([arena.size, arena.shared]).toEqual([0, 0]);
  });

  it('grows a page of 4,096 slots at a time, keeps boots exact across pages, and reuses freed slots before growing', () => {
    const arena = new SessionArena();
    const timelines = Array.from({ length: 3000 }, (_, i) => new BootTimeline(`02:00:00:00:${((i >> 8) & 255).toString(16).padStart(2, '0')}:${(i & 255).toString(16).padStart(2, '0')}`, 3, arena));
    for (let round = 0; round < 5; round++) timelines.forEach((t, i) => boot(t, 1000 * round + i, `seat-${i}`));
    // Two closed boots a device: 6,000 slots in two pages; a worker and a vars detail a device.
    expect([arena.size, arena.capacity, arena.shared]).toEqual([6000, 8192, 6000]);
    for (const i of [0, 2047, 2048, 2999]) {
      expect(timelines[i].sessions.map((s) => [s.started, s.worker, s.stages.map((m) => `${m.stage}@${m.at}`).join(), s.detailOf('vars')])).toEqual(
        [2, 3, 4].map((round) => [1000 * round + i, `seat-${i}`, [0, 5, 9].map((d, k) => `${['report', 'vars', 'disk'][k]}@${1000 * round + i + d}`).join(), { answer: 'disk', disk: `iqn.x:seat-${i}` }]),
      );
    }
    timelines.slice(0, 1500).forEach((t) => t.dispose());
    expect([arena.size, arena.shared]).toEqual([3000, 3000]);
    for (let round = 5; round < 8; round++) timelines.slice(0, 1500).forEach((t, i) => boot(t, 1000 * round + i, `seat-${i}`));
    expect([arena.size, arena.capacity, arena.shared]).toEqual([6000, 8192, 6000]);
    expect(timelines[1499].sessions.map((s) => s.started)).toEqual([5000 + 1499, 6000 + 1499, 7000 + 1499]);
    expect(timelines[1500].sessions.map((s) => s.started)).toEqual([2000 + 1500, 3000 + 1500, 4000 + 1500]);
  });

  it('shares a worker or a detail between the boots of one device only: another device holds its own entry, which outlives the first', () => {
    const arena = new SessionArena();
    const detail = { answer: 'pooled' };
    const a1 = arena.store(1000, 'w', 0, 5, [8, 41], [null, detail], -1);
    const b1 = arena.store(1000, 'w', 0, 5, [8, 41], [null, detail], -1);
    expect(arena.shared).toBe(4);
    // The same device's next boot refers to the entries of the one before it.
    const a2 = arena.store(2000, 'w', 0, 5, [8, 41], [null, detail], a1);
    expect(arena.shared).toBe(4);
    arena.free(a1);
    arena.free(a2);
    expect(arena.shared).toBe(2);
    expect([arena.worker(b1), arena.detail(b1, 1), arena.detail(b1, 0), arena.code(b1, 1)]).toEqual(['w', detail, null, 41]);
    // A previous boot whose worker differs: a new entry for the new one.
    const b2 = arena.store(2000, 'v', 0, 5, [8], [null], b1);
    expect([arena.shared, arena.worker(b2), arena.worker(b1)]).toEqual([3, 'v', 'w']);
  });

  it('keeps a boot that does not pack (a failure, five stages, a stage past 2^32 ms / 8) as its object, exactly', () => {
    const arena = new SessionArena();
    const t = new BootTimeline(MAC, 10, arena);
    boot(t, 1000, 'w1', 'empty');
    t.apply({ at: 2000, mac: MAC, stage: 'report', node: 'n1' });
    for (const stage of ['challenge', 'vars', 'menu', 'disk', 'os'] as const) t.apply({ at: 2001, mac: MAC, stage, node: 'n1', ...(stage === 'vars' ? { detail: { answer: 'disk' } } : {}) });
    t.apply({ at: 3000, mac: MAC, stage: 'report', node: 'n1' });
    t.apply({ at: 3000 + 2 ** 30, mac: MAC, stage: 'vars', node: 'n1', detail: { answer: 'disk' } });
    const before = t.sessions.map((s) => [s.started, s.stages, s.failure, s.last]);
    t.apply({ at: 4000 + 2 ** 30, mac: MAC, stage: 'report', node: 'n1' });
    expect(t.sessions.slice(0, 3).map((s) => [s.started, s.stages, s.failure, s.last])).toEqual(before);
    expect(t.sessions[0].failure).toEqual({ stage: 'vars', reason: 'empty', answer: 'empty' });
    expect(t.sessions[1].stageCount).toBe(6);
    expect(arena.size).toBe(3);
  });
});
