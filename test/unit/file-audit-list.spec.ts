import * as fs from 'node:fs';
import * as path from 'node:path';
import { Clock } from '../../src/control-plane/common/clock';
import type { AppConfig } from '../../src/control-plane/config/app-config';
import type { AuditEntry, AuditQuery } from '../../src/control-plane/repositories/audit/audit.repository';
import { FileAuditRepository } from '../../src/control-plane/repositories/audit/file-audit.repository';
import { FileSystem } from '../../src/shared/files/file-system';
import { tempDir } from '../helpers/app';

/**
 * GET /operations on files without reading from the start (bisecting for `since`, reading
 * backwards for `tail`) answers exactly what a full scan answers: every query below is checked
 * against a plain filter over all the entries, on an audit with lines longer than the read
 * window, unreadable lines, and gaps in the ids (cancelled commits).
 */
// The same trail in one file, and closed as segments (operations.<first>-<last>.jsonl) before it.
describe.each([
  ['in one file', [] as number[]],
  ['in closed segments and operations.jsonl', [3_000, 9_000, 9_001, 15_000]],
])('FileAuditRepository.list, the trail %s', (_layout, cuts) => {
  const dir = tempDir('kurrent-audit-list-');
  const all: AuditEntry[] = [];
  let repo: FileAuditRepository;

  beforeAll(async () => {
    const parts: { lines: string[]; ids: number[] }[] = [{ lines: [], ids: [] }];
    let id = 0;
    for (let i = 0; i < 20_000; i++) {
      id += i % 97 === 0 ? 3 : 1; // skipped ids
      const e: AuditEntry = { id, ts: '2026-12-03T00:00:00+00:00', op: ['device.report', 'worker.create', 'disk.reset', 'bind'][i % 4], status: 'ok', mac: `02:00:00:00:${String(i % 50).padStart(2, '0')}:01` };
      if (i % 2_500 === 7) e.note = 'x'.repeat(100_000); // longer than one 64 KiB read
      if (i % 3_000 === 11) e.macs = ['02:00:00:00:99:99'];
      all.push(e);
      if (cuts.includes(i)) parts.push({ lines: [], ids: [] });
      parts[parts.length - 1].lines.push(JSON.stringify(e));
      parts[parts.length - 1].ids.push(e.id);
      if (i % 4_000 === 5) parts[parts.length - 1].lines.push('{not json'); // hand-edited or glued by an old writer
    }
    fs.mkdirSync(path.join(dir, 'state'), { recursive: true });
    const active = parts.pop()!;
    for (const p of parts) fs.writeFileSync(path.join(dir, 'state', `operations.${p.ids[0]}-${p.ids[p.ids.length - 1]}.jsonl`), p.lines.join('\n') + '\n');
    fs.writeFileSync(path.join(dir, 'state', 'operations.jsonl'), active.lines.join('\n') + '\n');
    repo = new FileAuditRepository({ stateDir: path.join(dir, 'state') } as AppConfig, new FileSystem(), new Clock());
    await repo.onModuleInit();
  });
  afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

  const reference = (q: AuditQuery & { since: number; limit: number }) => {
    const m = all.filter(
      (e) =>
        e.id > q.since &&
        (!q.mac || e.mac === q.mac || (Array.isArray(e.macs) && e.macs.includes(q.mac))) &&
        (!q.op || (q.op.endsWith('.*') ? e.op.startsWith(q.op.slice(0, -1)) : e.op === q.op)),
    );
    return q.tail ? m.slice(-q.tail) : m.slice(0, q.limit);
  };
  const last = () => all[all.length - 1].id;

  it.each([
    ['from the start', { since: 0, limit: 100 }],
    ['after the middle', { since: 10_150, limit: 100 }],
    ['after an id that was skipped', { since: 97 * 50 + 2, limit: 5 }],
    ['after an id past the end', { since: 99_999_999, limit: 100 }],
    ['across a segment boundary', { since: 9_150, limit: 400 }],
    ['from the last id of a segment', { since: 0, limit: 100, sinceAt: 9_000 }],
    ['after the last but three', { since: 0, limit: 100, sinceFromEnd: 3 }],
    ['a rare filter from the middle', { since: 9_000, limit: 10, mac: '02:00:00:00:99:99' }],
    ['an op family', { since: 15_000, limit: 50, op: 'device.*' }],
    ['tail 100', { since: 0, limit: 100, tail: 100 }],
    ['tail 1, filtered by MAC', { since: 0, limit: 100, tail: 1, mac: '02:00:00:00:07:01' }],
    ['tail of a rare filter (reads back to the start)', { since: 0, limit: 100, tail: 50, mac: '02:00:00:00:99:99' }],
    ['tail after a cursor near the end', { since: 0, limit: 100, tail: 100, sinceFromEnd: 10 }],
    ['tail over the long lines', { since: 0, limit: 100, tail: 3000, op: 'worker.create' }],
  ])('%s: the same entries as a full scan', async (_name, raw) => {
    const { sinceFromEnd, sinceAt, ...q } = raw as AuditQuery & { since: number; limit: number; sinceFromEnd?: number; sinceAt?: number };
    if (sinceFromEnd !== undefined) q.since = last() - sinceFromEnd;
    if (sinceAt !== undefined) q.since = all[sinceAt - 1].id;
    const got = await repo.list(q);
    const want = reference(q);
    expect(got.entries.map((e) => e.id)).toEqual(want.map((e) => e.id));
    expect(got.next_cursor).toBe(want.length ? want[want.length - 1].id : q.since);
  });
});

/**
 * Writing past the segment size closes operations.jsonl as a segment; a restart continues the ids
 * after the segments (even when operations.jsonl is missing: a kill right after the rename); a
 * prune drops only whole old segments that no cursor holds, never operations.jsonl.
 */
describe('FileAuditRepository segments and retention', () => {
  const dir = tempDir('kurrent-audit-seg-');
  const state = path.join(dir, 'state');
  let now = Date.parse('2026-11-01T00:00:00Z');
  const clock = Object.assign(new Clock(), { now: () => new Date(now) });
  const open = async () => {
    const r = new FileAuditRepository({ stateDir: state, auditSegmentBytes: 20_000 } as AppConfig, new FileSystem(), clock);
    await r.onModuleInit();
    return r;
  };
  const segments = () => fs.readdirSync(state).filter((f) => /^operations\.\d+-\d+\.jsonl$/.test(f)).sort((a, b) => parseInt(a.split('.')[1]) - parseInt(b.split('.')[1]));
  beforeAll(() => fs.mkdirSync(state, { recursive: true }));
  afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

  it('closes segments as it writes, reads them as one trail, and continues ids after a restart', async () => {
    let repo = await open();
    for (let i = 0; i < 300; i++) await repo.record('test.entry', { n: i, pad: 'p'.repeat(200) });
    const segs = segments();
    expect(segs.length).toBeGreaterThanOrEqual(2);
    // Names carry the ids they hold, back to back.
    const ranges = segs.map((f) => f.split('.')[1].split('-').map(Number));
    expect(ranges[0][0]).toBe(1);
    for (let i = 1; i < ranges.length; i++) expect(ranges[i][0]).toBe(ranges[i - 1][1] + 1);
    const all = await repo.list({ since: 0, limit: 10_000 });
    expect(all.entries.map((e) => e.id)).toEqual(Array.from({ length: 300 }, (_, i) => i + 1));
    expect((await repo.list({ since: 0, limit: 10_000, tail: 5 })).entries.map((e) => e.id)).toEqual([296, 297, 298, 299, 300]);
    await repo.onApplicationShutdown();

    // A kill right after a segment was closed: no operations.jsonl at all.
    const lastSeg = segs[segs.length - 1];
    fs.rmSync(path.join(state, 'operations.jsonl'), { force: true });
    const lastId = Number(lastSeg.split('.')[1].split('-')[1]);
    repo = await open();
    expect((await repo.record('test.after-restart')).id).toBe(lastId + 1);
    await repo.onApplicationShutdown();
  });

  it('prune drops the oldest whole segments past the retention, not above a held cursor, never the open file', async () => {
    const repo = await open();
    const segs = segments();
    const ids = segs.map((f) => f.split('.')[1].split('-').map(Number));
    const before = (await repo.list({ since: 0, limit: 10_000 })).entries;
    // Entries were written at `now`; a retention cut before them drops nothing.
    expect(await repo.prune(now - 1000, Number.MAX_SAFE_INTEGER)).toBeNull();
    now += 30 * 86_400_000;
    // A cursor inside the second segment: only the first goes.
    const held = ids[1][0] + 1;
    expect(await repo.prune(now - 7 * 86_400_000, held)).toEqual({ from_id: 1, through_id: ids[0][1] });
    expect(segments()).toEqual(segs.slice(1));
    const after = (await repo.list({ since: 0, limit: 10_000 })).entries;
    expect(after.map((e) => e.id)).toEqual(before.filter((e) => e.id > ids[0][1]).map((e) => e.id));
    // The follower reads on from its cursor and misses nothing.
    expect((await repo.list({ since: held, limit: 10_000 })).entries).toEqual(before.filter((e) => e.id > held));
    // No hold: every old segment goes, operations.jsonl stays.
    const rest = await repo.prune(now - 7 * 86_400_000, Number.MAX_SAFE_INTEGER);
    expect(rest).toEqual({ from_id: ids[1][0], through_id: ids[ids.length - 1][1] });
    expect(segments()).toEqual([]);
    expect(fs.existsSync(path.join(state, 'operations.jsonl'))).toBe(true);
    expect((await repo.list({ since: 0, limit: 10_000 })).entries.map((e) => e.id)).toEqual(before.filter((e) => e.id > ids[ids.length - 1][1]).map((e) => e.id));
    // Ids go on.
    expect((await repo.record('test.after-prune')).id).toBe(before[before.length - 1].id + 1);
    await repo.onApplicationShutdown();
  });

  it('a read under way holds segments: prune skips, and closing waits for the next write', async () => {
    const repo = await open();
    for (let i = 0; i < 150; i++) await repo.record('test.entry', { n: i, pad: 'p'.repeat(200) });
    const segs = segments();
    expect(segs.length).toBeGreaterThanOrEqual(1);
    now += 30 * 86_400_000;
    const reading = repo.list({ since: 0, limit: 10_000 });
    expect(await repo.prune(now, Number.MAX_SAFE_INTEGER)).toBeNull();
    const page = await reading;
    expect(page.entries.length).toBeGreaterThanOrEqual(150);
    expect(segments()).toEqual(segs);
    expect(await repo.prune(now, Number.MAX_SAFE_INTEGER)).not.toBeNull();
    await repo.onApplicationShutdown();
  });
});
