import * as fs from 'node:fs';
import * as path from 'node:path';
import type { AppConfig } from '../../src/control-plane/config/app-config';
import { BootEvent, keptByPrune } from '../../src/control-plane/repositories/boot-events/boot-event.repository';
import { BootSnapshotFile } from '../../src/control-plane/repositories/boot-events/boot-snapshot-file';
import { FileBootEventRepository } from '../../src/control-plane/repositories/boot-events/file-boot-event.repository';
import { FileSystem } from '../../src/shared/files/file-system';
import { tempDir } from '../helpers/app';

describe('FileBootEventRepository: boot-events.jsonl read in chunks', () => {
  const dir = tempDir('kurrent-boot-events-');
  const file = path.join(dir, 'boot-events.jsonl');
  afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));
  const repo = () => new FileBootEventRepository({ stateDir: dir } as AppConfig, new FileSystem(), new BootSnapshotFile({ stateDir: dir } as AppConfig, new FileSystem()));
  const loaded = async (r: FileBootEventRepository, since: number) => {
    const out: BootEvent[] = [];
    await r.load(since, (e) => out.push(e));
    return out;
  };
  // ~3 MB: lines cut by the 1 MiB chunks.
  const events: BootEvent[] = Array.from({ length: 30_000 }, (_, i) => ({
    at: 1_000_000 + i,
    mac: `02:00:00:00:${((i >> 8) & 255).toString(16).padStart(2, '0')}:${(i & 255).toString(16).padStart(2, '0')}`,
    stage: i % 2 ? 'vars' : 'report',
    node: 'vm:1',
    ...(i % 2 ? { detail: { answer: 'disk', note: 'é✓'.repeat(i % 7) } } : { worker: `seat-${i}` }),
  }));
  const text = events.map((e) => JSON.stringify(e) + '\n').join('');

  it('loads every event since the cut, in order, and leaves a whole file alone', async () => {
    fs.writeFileSync(file, text);
    expect(fs.statSync(file).size).toBeGreaterThan(2 * 1024 * 1024);
    expect(await loaded(repo(), 0)).toEqual(events);
    expect(await loaded(repo(), 1_000_000 + 20_000)).toEqual(events.slice(20_000));
    expect(fs.readFileSync(file, 'utf8')).toBe(text);
  });

  it('a torn last line (a crash mid-append, even one cut just before its line end) is skipped and cut off the file', async () => {
    fs.writeFileSync(file, text + JSON.stringify(events[0]).slice(0, 20));
    expect(await loaded(repo(), 0)).toEqual(events);
    expect(fs.readFileSync(file, 'utf8')).toBe(text);
    // Cut exactly before its '\n', the last line is whole JSON but was never acknowledged: what
    // this start applies is what the file keeps (else the next start would not replay it).
    const extra = { ...events[0], at: events[events.length - 1].at + 1 };
    fs.writeFileSync(file, text + JSON.stringify(extra));
    expect(await loaded(repo(), 0)).toEqual(events);
    expect(fs.readFileSync(file, 'utf8')).toBe(text);
  });

  it('a prune rewrites the file only once it holds more than twice what the timelines hold, or an event past the retention', async () => {
    fs.writeFileSync(file, text);
    const r = repo();
    await loaded(r, 0);
    // Every device of the first 10,000 events loses what came before 1,005,000: 5,000 events.
    const cuts = new Map(events.slice(0, 10_000).map((e) => [e.mac, { before: 1_000_000 + 5_000 }]));
    await r.prune({ before: 0, cuts, held: 15_000 });
    expect(fs.readFileSync(file, 'utf8')).toBe(text);
    await r.prune({ before: 0, cuts, held: 14_999 });
    const kept = keptByPrune(events, { before: 0, cuts, held: 0 });
    expect(kept).toHaveLength(25_000);
    expect(await loaded(repo(), 0)).toEqual(kept);
    // Past the retention: rewritten whatever the timelines hold.
    await r.prune({ before: 1_000_000 + 29_000, cuts: new Map(), held: 1_000_000 });
    expect(await loaded(repo(), 0)).toEqual(kept.filter((e) => e.at >= 1_000_000 + 29_000));
  });

  /** A snapshot of `lines` at the repository's position now (as BootSessionsService writes one: the lines, then the commit). */
  const saveSnapshot = async (r: FileBootEventRepository, at: number, node: string, lines: string[]) => {
    const w = await r.openSnapshot(at, node);
    await w.add(lines);
    await r.commitSnapshot(w);
  };

  it('a snapshot stands at the position of its moment, after appends, a torn line cut off, and a prune rewrite alike', async () => {
    // `take` sees the snapshot's lines; the load that follows reads what came after it.
    const restart = async (since = 0) => {
      const r = repo();
      const lines: string[] = [];
      const used = await r.restore(since, (l) => lines.push(l));
      return { r, used, lines, events: await loaded(r, since) };
    };
    fs.writeFileSync(file, text + '{"at":');
    const a = repo();
    await loaded(a, 0); // cuts the torn line
    await a.append(events.slice(0, 2).map((e) => ({ ...e, at: e.at + 50_000 })));
    await saveSnapshot(a, 2_000_000, 'n1', ['["t1"]', '["t2"]']);
    await a.append([{ ...events[2], at: 1_060_000, node: 'n2' }, { ...events[3], at: 1_060_001, node: 'n1' }]);
    const b = await restart();
    // Everything appended after the snapshot, the writer's own events too (a snapshot of a running
    // control plane, then a crash): the file has one writer, and what it holds by then is in the lines.
    expect([b.used, b.lines, b.events]).toEqual([true, ['["t1"]', '["t2"]'], [{ ...events[2], at: 1_060_000, node: 'n2' }, { ...events[3], at: 1_060_001, node: 'n1' }]]);
    // A prune rewrite by the same repository moves the position with it.
    await b.r.prune({ before: 1_000_000 + 29_000, cuts: new Map(), held: 0 });
    await saveSnapshot(b.r, 2_000_000, 'n1', ['["t3"]']);
    const c = await restart();
    expect([c.used, c.lines, c.events]).toEqual([true, ['["t3"]'], []]);
    // The same position in a file of another history (rewritten by someone else, or a backup restored): not used.
    await saveSnapshot(c.r, 2_000_000, 'n1', ['["t4"]']);
    fs.writeFileSync(file + '.new', fs.readFileSync(file, 'utf8').replace('"vars"', '"menu"'));
    fs.renameSync(file + '.new', file);
    const d = await restart();
    expect([d.used, d.lines.length, d.events.length > 1000]).toEqual([false, 0, true]);
    // Older than the retention cut: not used.
    await saveSnapshot(d.r, 2_000_000, 'n1', ['["t5"]']);
    const e = await restart(2_000_001);
    expect([e.used, e.lines]).toEqual([false, []]);
  });

  it('a snapshot is written in pieces with its header last; one aborted, or whose header does not fit, leaves nothing', async () => {
    const snaps = new BootSnapshotFile({ stateDir: dir } as AppConfig, new FileSystem());
    const snapFile = path.join(dir, 'boot-timelines.snapshot');
    const temps = () => fs.readdirSync(dir).filter((n) => n.endsWith('.tmp'));
    const w = await snaps.open(5_000, 'n1');
    await w.add(['["a",1]', '["b",2]']);
    await w.add([]);
    await w.add(['["a",3]']);
    expect(fs.existsSync(snapFile)).toBe(false);
    await w.commit({ bytes: 7, last: 'é' });
    const text = fs.readFileSync(snapFile, 'utf8');
    // The header's room is padded with spaces: still one JSON line.
    expect(JSON.parse(text.slice(0, text.indexOf('\n')))).toEqual({ kurrent_boot_snapshot: 2, at: 5_000, node: 'n1', cursor: { bytes: 7, last: 'é' } });
    expect(text.slice(text.indexOf('\n') + 1)).toBe('["a",1]\n["b",2]\n["a",3]\n');
    expect(fs.statSync(snapFile).mode & 0o777).toBe(0o600);
    // What a killed write left (another process's temp file) goes at the next take; another file's temp stays.
    fs.writeFileSync(path.join(dir, '.boot-timelines.snapshot.999999.1.tmp'), 'cut short');
    fs.writeFileSync(path.join(dir, '.other.999999.1.tmp'), 'not ours');
    const lines: string[] = [];
    const header = await snaps.take(async (h) => h.at === 5_000, (l) => lines.push(l));
    expect(temps()).toEqual(['.other.999999.1.tmp']);
    fs.rmSync(path.join(dir, '.other.999999.1.tmp'));
    expect([header?.cursor, lines]).toEqual([{ bytes: 7, last: 'é' }, ['["a",1]', '["b",2]', '["a",3]']]);
    expect(fs.existsSync(snapFile)).toBe(false);

    // Version 1 (an older release's clean stop) still reads; a version this release does not know is refused.
    fs.writeFileSync(snapFile, JSON.stringify({ kurrent_boot_snapshot: 1, at: 7_000, node: 'n0', cursor: null }) + '\n["z",1]\n');
    const old: string[] = [];
    expect((await snaps.take(async () => true, (l) => old.push(l)))?.node).toBe('n0');
    expect(old).toEqual(['["z",1]']);
    fs.writeFileSync(snapFile, JSON.stringify({ kurrent_boot_snapshot: 3, at: 7_000, node: 'n0', cursor: null }) + '\n["z",1]\n');
    await expect(snaps.take(async () => true, () => undefined)).rejects.toThrow('not a snapshot header');
    expect(fs.existsSync(snapFile)).toBe(false);

    const aborted = await snaps.open(6_000, 'n1');
    await aborted.add(['["c",1]']);
    await aborted.abort();
    const big = await snaps.open(6_000, 'n1');
    await expect(big.commit({ last: 'x'.repeat(20_000) })).rejects.toThrow(/header needs \d+ bytes/);
    expect([fs.existsSync(snapFile), temps()]).toEqual([false, []]);
  });

  it('a missing file is no events', async () => {
    fs.rmSync(file);
    expect(await loaded(repo(), 0)).toEqual([]);
    expect(fs.existsSync(file)).toBe(false);
  });
});
