import { createHash } from 'node:crypto';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { normalizeId, normalizeMac } from '../../src/shared/mac';
import { AtomicFileWriter, FileSystem } from '../../src/shared/files/file-system';
import { LedgerMap, type Seal } from '../../src/shared/files/ledger-map';
import { isDeviceMac } from '../../src/shared/grammars';
import { keySha256 } from '../../src/control-plane/common/device-key';
import {
  DEVICE_SEAL,
  DeviceRecord,
  emptyFingerprint,
  LEDGER_GRAMMAR,
  newWorker,
  validateDevice,
  validateWorker,
  WORKER_SEAL,
  WorkerRecord,
} from '../../src/control-plane/repositories/ledger/records';

describe('MAC and id normalisation', () => {
  it.each([
    ['00:0c:29:b9:8b:2d', '00:0c:29:b9:8b:2d'],
    ['00-0C-29-B9-8B-2D', '00:0c:29:b9:8b:2d'],
    ['000c.29b9.8b2d', '00:0c:29:b9:8b:2d'],
    ['000C29B98B2D', '00:0c:29:b9:8b:2d'],
    [' 000c29b98b2d ', '00:0c:29:b9:8b:2d'],
  ])('%s -> %s', (i, o) => expect(normalizeMac(i)).toBe(o));

  it.each(['', '00:0c:29', '00:0c:29:b9:8b:2d:00', 'gg:0c:29:b9:8b:2d', '00 0c 29 b9 8b 2d', 42, null])('rejects %p', (i) => {
    expect(normalizeMac(i)).toBeNull();
  });

  it('ids: lower-cased, safe characters only, no .., no leading dot', () => {
    expect(normalizeId('Worker-01')).toBe('worker-01');
    expect(normalizeId('lab_pc.1')).toBe('lab_pc.1');
    for (const bad of ['', '..', 'a..b', '.x', '-x', 'a/b', 'a b', 'a:b', 'x'.repeat(64), 'ä']) expect(normalizeId(bad)).toBeNull();
  });
});

describe('LedgerMap', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ledger-'));
  const file = path.join(dir, 'workers.yml');
  const mk = () => new LedgerMap<WorkerRecord>(file, 'workers', '# header', validateWorker, new FileSystem());
  const w = (id: string): WorkerRecord => newWorker(id);

  it('round-trips through its own format and through generic YAML', async () => {
    const m = mk();
    m.loadSync();
    expect(m.size).toBe(0);
    const changes = new Map([['a', w('a')], ['b', w('b')]]);
    m.apply(changes);
    await m.checkpoint();
    const text = fs.readFileSync(file, 'utf8');
    expect(text).toBe(`# header\nworkers:\n  "a": ${JSON.stringify(w('a'))}\n  "b": ${JSON.stringify(w('b'))}\n`);
    const again = mk();
    again.loadSync();
    expect([...again.values()]).toEqual([w('a'), w('b')]);
    // Same data in block style loads identically (through the YAML parser).
    fs.writeFileSync(file, 'workers:\n  a:\n    state: registered\n  b:\n    hostname: b\n    state: registered\n');
    const block = mk();
    block.loadSync();
    expect([...block.values()]).toEqual([w('a'), w('b')]);
    const del = new Map<string, WorkerRecord | undefined>([['a', undefined], ['b', undefined]]);
    expect(block.render(del).toString()).toBe('# header\nworkers: {}\n');
  });

  it('renders many chunks of text, beyond ASCII too, as one JSON line per record, and re-serialises only what changed', () => {
    type Note = { text: string; n: number };
    const notes = new LedgerMap<Note>(path.join(dir, 'notes.yml'), 'notes', '# notes', (_k, v) => ({ ok: true, value: v as Note }), new FileSystem());
    notes.loadSync();
    // ~180 KB of text: the render is cut into several chunks, and a cut may fall anywhere among lines.
    const all = new Map(Array.from({ length: 1500 }, (_, i) => [`k${i}`, { text: `Grüße ${'é'.repeat(i % 97)} — ${i}`, n: i }] as [string, Note]));
    notes.apply(all);
    const expected = (m: Map<string, Note>) => `# notes\nnotes:\n${[...m].map(([k, v]) => `  ${JSON.stringify(k)}: ${JSON.stringify(v)}\n`).join('')}`;
    expect(notes.render().toString('utf8')).toBe(expected(all));
    // A record changed after the lines were cached: its line is new, the others are the cached ones.
    const changed = { text: 'changed ✓', n: -1 };
    notes.apply(new Map([['k700', changed]]));
    all.set('k700', changed);
    const stringify = jest.spyOn(JSON, 'stringify');
    const text = notes.render().toString('utf8');
    // Each line quotes its key; only the changed record is serialised again.
    const records = stringify.mock.calls.filter(([v]) => typeof v === 'object');
    stringify.mockRestore();
    expect(records).toEqual([[changed]]);
    expect(text).toBe(expected(all));
    // Pending changes passed to render win over memory, and a key only in them is appended.
    const pending = new Map<string, Note | undefined>([['k3', undefined], ['new', { text: 'ñ', n: 0 }]]);
    const withPending = new Map(all);
    withPending.delete('k3');
    withPending.set('new', { text: 'ñ', n: 0 });
    expect(notes.render(pending).toString('utf8')).toBe(expected(withPending));
  });

  it('a checkpoint renders in slices, letting the event loop in: telemetry landing meanwhile keeps the file stale, and no line of an older record is cached', async () => {
    type Seen = { id: string; last: string };
    const f = path.join(dir, 'sliced.yml');
    const seen = new LedgerMap<Seen>(f, 'seen', '# seen', (_k, v) => ({ ok: true, value: v as Seen }), new FileSystem());
    seen.loadSync();
    const all = new Map(Array.from({ length: 5000 }, (_, i) => [`k${i}`, { id: `k${i}`, last: 't0' }] as [string, Seen]));
    seen.apply(all);
    const expected = seen.render().toString('utf8');
    // Lines not cached yet: the checkpoint serialises them, a slice at a time.
    let turns = 0;
    // Lines rendered (cached) when each piece was written, and the turn of the commit: the file goes out as it is rendered.
    const renderedAtWrite: number[] = [];
    let committedAt = -1;
    const rendered = () => (fresh as unknown as { lines: Map<string, string> }).lines.size;
    class Fs extends FileSystem {
      override async openAtomic(...args: Parameters<FileSystem['openAtomic']>): Promise<AtomicFileWriter> {
        const w = await super.openAtomic(...args);
        return { ...w, write: (d) => (renderedAtWrite.push(rendered()), w.write(d)), commit: (o) => ((committedAt = turns), w.commit(o)) };
      }
    }
    const fresh = new LedgerMap<Seen>(f, 'seen', '# seen', (_k, v) => ({ ok: true, value: v as Seen }), new Fs());
    fresh.loadSync();
    fresh.apply(all);
    const ticking = setInterval(() => turns++, 0);
    // Between two slices (once the first pieces are written), k4999 (not rendered yet) is replaced and k0 (rendered) is touched in place.
    let touched = false;
    const touchOnce = () => {
      if (touched || !renderedAtWrite.length) return;
      touched = true;
      fresh.touch('k4999', { id: 'k4999', last: 't1' });
      fresh.touchInPlace('k0', fresh.get('k0')!, (r) => (r.last = 't1'));
    };
    const touching = setInterval(touchOnce, 0);
    await fresh.checkpoint();
    clearInterval(touching);
    expect(touched).toBe(true);
    clearInterval(ticking);
    // Timers ran while it rendered; its first pieces (64 KB, ~1,600 of these lines) were written long before all 5,000 lines were rendered.
    expect(committedAt).toBeGreaterThan(0);
    expect(renderedAtWrite[0]).toBeLessThan(2500);
    expect(renderedAtWrite.length).toBeGreaterThan(2);
    const text = fs.readFileSync(f, 'utf8');
    // The file is the snapshot: k4999 as it was; k0 as rendered before its touch.
    expect(text).toBe(expected);
    expect(fresh.stale).toBe(true);
    // The next render has both touches: nothing stale was cached for them.
    const next = fresh.render().toString('utf8');
    expect(next).toContain('"k4999": {"id":"k4999","last":"t1"}');
    expect(next).toContain('"k0": {"id":"k0","last":"t1"}');
    // A start reads what the checkpoint wrote as the file it knows (its SHA-256 is the text's).
    expect(createHash('sha256').update(text).digest('hex')).toBe((fresh as unknown as { knownSha: string }).knownSha);
  });

  it("another process's durable telemetry (refreshInPlace, refresh): memory and the next render follow, nothing is marked to write", () => {
    type Seen = { id: string; last: string };
    const seen = new LedgerMap<Seen>(path.join(dir, 'seen.yml'), 'seen', '# seen', (_k, v) => ({ ok: true, value: v as Seen }), new FileSystem());
    seen.loadSync();
    const a = { id: 'a', last: 't0' };
    seen.apply(new Map([['a', a]]));
    seen.render(); // caches a's line
    seen.stale = false;
    seen.refreshInPlace('a', a, (r) => (r.last = 't1'));
    expect(seen.get('a')).toBe(a);
    expect(seen.render().toString()).toContain('"a": {"id":"a","last":"t1"}');
    const b = { id: 'a', last: 't2' };
    seen.refresh('a', b);
    expect(seen.get('a')).toBe(b);
    expect(seen.render().toString()).toContain('"a": {"id":"a","last":"t2"}');
    expect([seen.stale, seen.dirtyKeys.size]).toEqual([false, 0]);
    // Only the record in memory is changed in place, and only a key in memory is replaced.
    expect(() => seen.refreshInPlace('a', a, () => undefined)).toThrow('not the record in memory');
    expect(() => seen.refresh('zz', b)).toThrow('not in memory');
  });

  it('keeps a line only for a record that did not move through a whole checkpoint, and never drops its entry for a move', async () => {
    type Seen = { id: string; last: string };
    const file = path.join(dir, 'moves.yml');
    const seen = new LedgerMap<Seen>(file, 'seen', '# seen', (_k, v) => ({ ok: true, value: v as Seen }), new FileSystem());
    seen.loadSync();
    const a = { id: 'a', last: 't0' };
    const b = { id: 'b', last: 't0' };
    seen.apply(new Map([['a', a], ['b', b]]));
    const lines = (seen as unknown as { lines: Map<string, string> }).lines;
    const cached = () => Object.fromEntries([...lines].map(([k, v]) => [k, v.startsWith('{') ? v : 'none']));
    const onDisk = () => fs.readFileSync(file, 'utf8');
    await seen.checkpoint();
    expect(cached()).toEqual({ a: '{"id":"a","last":"t0"}', b: '{"id":"b","last":"t0"}' });
    // a moves (telemetry in place): its line goes, its entry stays.
    seen.touchInPlace('a', a, (r) => (r.last = 't1'));
    expect(cached()).toEqual({ a: 'none', b: '{"id":"b","last":"t0"}' });
    // The checkpoint after the move writes a's new line and keeps none for it.
    await seen.checkpoint();
    expect(onDisk()).toContain('"a": {"id":"a","last":"t1"}');
    expect(cached()).toEqual({ a: 'none', b: '{"id":"b","last":"t0"}' });
    // a moved nowhere through that one: the next checkpoint keeps its line.
    seen.touchInPlace('b', b, (r) => (r.last = 't1'));
    await seen.checkpoint();
    expect(cached()).toEqual({ a: '{"id":"a","last":"t1"}', b: 'none' });
    // A move between two checkpoints starts over, as does a record replaced by telemetry.
    seen.touchInPlace('a', a, (r) => (r.last = 't2'));
    seen.touch('b', { id: 'b', last: 't2' });
    await seen.checkpoint();
    expect(cached()).toEqual({ a: 'none', b: 'none' });
    expect(onDisk()).toContain('"a": {"id":"a","last":"t2"}');
    expect(onDisk()).toContain('"b": {"id":"b","last":"t2"}');
    // Quiet through that one: kept again by the next.
    await seen.checkpoint();
    expect(cached()).toEqual({ a: '{"id":"a","last":"t2"}', b: '{"id":"b","last":"t2"}' });
    expect(lines.size).toBe(2);
  });

  it('keeps no line-cache entry for telemetry on a map not loaded from its file (PostgreSQL)', () => {
    type Seen = { id: string; last: string };
    const seen = new LedgerMap<Seen>(path.join(dir, 'never.yml'), 'seen', '# seen', (_k, v) => ({ ok: true, value: v as Seen }), new FileSystem());
    const a = { id: 'a', last: 't0' };
    seen.apply(new Map([['a', a], ['b', { id: 'b', last: 't0' }]]));
    const lines = (seen as unknown as { lines: Map<string, string> }).lines;
    seen.touchInPlace('a', a, (r) => (r.last = 't1'));
    seen.touch('b', { id: 'b', last: 't1' });
    seen.refreshInPlace('a', a, (r) => (r.last = 't2'));
    seen.refresh('b', { id: 'b', last: 't2' });
    expect(lines.size).toBe(0);
    expect(seen.get('a')?.last).toBe('t2');
    expect(seen.get('b')?.last).toBe('t2');
  });

  it('loaded from its file, the first checkpoint keeps no line of a record touched before it', async () => {
    type Seen = { id: string; last: string };
    const file = path.join(dir, 'first.yml');
    fs.writeFileSync(file, 'seen:\n  "a": {"id":"a","last":"t0"}\n  "b": {"id":"b","last":"t0"}\n');
    const seen = new LedgerMap<Seen>(file, 'seen', '# seen', (_k, v) => ({ ok: true, value: v as Seen }), new FileSystem());
    seen.loadSync();
    const lines = (seen as unknown as { lines: Map<string, string> }).lines;
    seen.touchInPlace('a', seen.get('a')!, (r) => (r.last = 't1'));
    await seen.checkpoint();
    expect(fs.readFileSync(file, 'utf8')).toContain('"a": {"id":"a","last":"t1"}');
    expect(Object.fromEntries([...lines].map(([k, v]) => [k, v.startsWith('{') ? v : 'none']))).toEqual({ a: 'none', b: '{"id":"b","last":"t0"}' });
  });

  it('reloads after a hand edit and only then', async () => {
    fs.writeFileSync(file, 'workers:\n  a: {"state":"registered"}\n');
    const m = mk();
    m.loadSync();
    expect(m.checkFile().kind).toBe('same');
    fs.writeFileSync(file, 'workers:\n  a: {"state":"ready"}\n  c: {"state":"registered"}\n');
    const c = m.checkFile();
    if (c.kind !== 'changed') throw new Error(`expected a change, got ${c.kind}`);
    const { merged, changed } = m.merge(c.theirs);
    expect(changed.sort()).toEqual(['a', 'c']);
    m.adopt(merged, c.theirs, c.stamp, changed, c.text);
    expect(m.get('a')?.state).toBe('ready');
    expect(m.size).toBe(2);
    expect(m.checkFile().kind).toBe('same');
  });
});

describe('LedgerMap: loading a file larger than one read chunk', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ledger-big-'));
  const file = path.join(dir, 'workers.yml');
  const mk = () => new LedgerMap<WorkerRecord>(file, 'workers', '# header', validateWorker, new FileSystem());
  let written = '';
  const sha = () => createHash('sha256').update(fs.readFileSync(file)).digest('hex');
  // ~2.5 MB: lines and multi-byte characters cut by the 1 MiB chunks.
  const many = new Map<string, WorkerRecord>();
  for (let i = 0; i < 6000; i++) {
    const id = `seat-${i}`;
    many.set(id, newWorker(id, { default_os: `Débian ✓ ${'x'.repeat(i % 300)}`, created_at: '2026-12-04T00:00:00.000Z' }));
  }

  it('loads every entry as written, and knows the hash of the bytes it read', async () => {
    const m = mk();
    m.loadSync();
    m.apply(many);
    await m.checkpoint();
    expect(fs.statSync(file).size).toBeGreaterThan(2 * 1024 * 1024);
    const files = new FileSystem();
    const whole = jest.spyOn(files, 'readBytesSync');
    const again = new LedgerMap<WorkerRecord>(file, 'workers', '# header', validateWorker, files);
    again.loadSync();
    expect(whole).not.toHaveBeenCalled(); // read in chunks, never whole
    expect(again.size).toBe(6000);
    expect([...again.entries()]).toEqual([...many.entries()]);
    expect(again.knownSha).toBe(sha());
    written = fs.readFileSync(file, 'utf8');
  });

  it('a bad entry past the first chunk is refused with its own line number', async () => {
    const lines = written.split('\n');
    const at = lines.findIndex((l) => l.startsWith('  "seat-5000"'));
    lines[at] = lines[at].replace('"state":"registered"', '"state":"flying"');
    fs.writeFileSync(file, lines.join('\n'));
    expect(() => mk().loadSync()).toThrow(`${file}:${at + 1}: "seat-5000": state must be one of registered, ready, installing`);
    lines[at] = lines[2].replace('"seat-0"', '"seat-1"');
    fs.writeFileSync(file, lines.join('\n'));
    expect(() => mk().loadSync()).toThrow(`${file}:${at + 1}: duplicate key "seat-1"`);
  });

  it('a layout the fast path does not take, found past the first chunk, is parsed as YAML whole', () => {
    const lines = written.split('\n');
    const at = lines.findIndex((l) => l.startsWith('  "seat-5000"'));
    lines[at] = '  seat-5000:\n    state: ready';
    fs.writeFileSync(file, lines.join('\n'));
    const m = mk();
    m.loadSync();
    expect(m.size).toBe(6000);
    expect(m.get('seat-5000')).toEqual(newWorker('seat-5000', { state: 'ready' }));
    expect(m.get('seat-5999')).toEqual(many.get('seat-5999'));
    expect(m.knownSha).toBe(sha());
  });
});

describe('LedgerMap: files sealed by their checkpoints', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ledger-sealed-'));
  const file = path.join(dir, 'workers.yml');
  const validator = jest.fn(validateWorker);
  const mk = (seal: Seal<WorkerRecord> | null = WORKER_SEAL) => new LedgerMap<WorkerRecord>(file, 'workers', '# header', validator, new FileSystem(), undefined, seal ?? undefined);
  const sha = () => createHash('sha256').update(fs.readFileSync(file)).digest('hex');
  // ~2.5 MB: more than two read chunks, the seal's hash cut across them.
  const many = new Map<string, WorkerRecord>();
  for (let i = 0; i < 6000; i++) {
    const id = `seat-${i}`;
    many.set(id, newWorker(id, { arch: i % 2 ? 'aarch64' : 'x86_64', default_os: `Débian ✓ ${'x'.repeat(i % 300)}`, created_at: '2026-12-04T00:00:00.000Z' }));
  }
  let written = '';
  let small = '';
  beforeEach(() => validator.mockClear());

  it('a checkpoint seals the file in its header, and a start takes that file without validating an entry', async () => {
    const m = mk();
    m.loadSync();
    m.apply(many);
    await m.checkpoint();
    written = fs.readFileSync(file, 'utf8');
    const [header, seal] = written.split('\n', 2);
    const below = written.slice(header.length + seal.length + 2);
    expect(header).toBe('# header');
    expect(below.startsWith('workers:\n  "seat-0": ')).toBe(true);
    expect(seal).toBe(`# sealed by Kurrent: grammar ${LEDGER_GRAMMAR}, sha256 of the lines below ${createHash('sha256').update(below).digest('hex')}`);
    // What the change log's records name as their base: the bytes below the seal.
    expect(m.knownSha).toBe(createHash('sha256').update(below).digest('hex'));
    expect(m.render().toString('utf8')).toBe(written);
    const again = mk();
    again.loadSync();
    expect(again.loadedSealed).toBe(true);
    expect(validator).not.toHaveBeenCalled();
    expect([...again.entries()]).toEqual([...many.entries()]);
    expect(again.knownSha).toBe(m.knownSha);
    // A map without a seal reads the same file, validating each entry (the seal is a comment).
    const plain = mk(null);
    plain.loadSync();
    expect(plain.loadedSealed).toBe(false);
    expect(plain.knownSha).toBe(sha());
    expect(validator).toHaveBeenCalledTimes(6000);
    expect([...plain.entries()]).toEqual([...many.entries()]);
    const three = new LedgerMap<WorkerRecord>(path.join(dir, 'three.yml'), 'workers', '# header', validator, new FileSystem(), undefined, WORKER_SEAL);
    three.loadSync();
    three.apply(new Map([...many].slice(0, 3)));
    await three.checkpoint();
    small = fs.readFileSync(three.file, 'utf8');
  });

  it('an entry edited by hand breaks the seal: every entry is validated, a bad one refused with its line number', () => {
    const lines = written.split('\n');
    const at = lines.findIndex((l) => l.startsWith('  "seat-5000"'));
    lines[at] = lines[at].replace('"state":"registered"', '"state":"ready"');
    fs.writeFileSync(file, lines.join('\n'));
    const m = mk();
    m.loadSync();
    expect(m.loadedSealed).toBe(false);
    expect(validator).toHaveBeenCalledTimes(6000);
    expect(m.get('seat-5000')).toEqual({ ...many.get('seat-5000'), state: 'ready' });
    expect(m.knownSha).toBe(createHash('sha256').update(lines.slice(2).join('\n')).digest('hex'));
    // The same text merged as a hand edit while running gets the same knownSha.
    const running = mk();
    running.loadSync();
    const c = running.checkFile();
    expect(c.kind).toBe('same');
    running.adopt(new Map(), new Map(), null, [], lines.join('\n'));
    expect(running.knownSha).toBe(m.knownSha);
    lines[at] = lines[at].replace('"state":"ready"', '"state":"flying"');
    fs.writeFileSync(file, lines.join('\n'));
    expect(() => mk().loadSync()).toThrow(`${file}:${at + 1}: "seat-5000": state must be one of registered, ready, installing`);
    lines[at] = lines.find((l) => l.startsWith('  "seat-0"'))!.replace('"seat-0"', '"seat-1"');
    fs.writeFileSync(file, lines.join('\n'));
    expect(() => mk().loadSync()).toThrow(`${file}:${at + 1}: duplicate key "seat-1"`);
  });

  it.each([
    ['another grammar', (t: string) => t.replace(`grammar ${LEDGER_GRAMMAR},`, `grammar ${LEDGER_GRAMMAR + 1},`)],
    ['an entry added below', (t: string) => `${t}  "late": ${JSON.stringify(newWorker('late'))}\n`],
    ['a blank line added at the end', (t: string) => `${t}\n`],
    ['the seal below the root key', (t: string) => t.replace(/^(# header\n)(# sealed[^\n]*\n)(workers:\n)/, '$1$3$2')],
    ['a blank line above the seal', (t: string) => t.replace('# header\n', '# header\n\n')],
  ])('%s: the file is validated entry by entry', (_name, edit) => {
    fs.writeFileSync(file, edit(small));
    const m = mk();
    m.loadSync();
    expect(m.loadedSealed).toBe(false);
    expect(validator).toHaveBeenCalledTimes(m.size);
    for (const [k, v] of many) if (m.has(k)) expect(m.get(k)).toEqual(v);
  });

  it('adopts any JSON an unsealed file holds without throwing: the validator names what is wrong', () => {
    fs.writeFileSync(file, `workers:\n  "a": {"state":"registered","arch":7,"boot":null}\n  "b": {"state":"registered","boot":5}\n`);
    expect(() => mk().loadSync()).toThrow(`${file}:3: "b": boot must be a mapping`);
    const devices = path.join(dir, 'devices.yml');
    fs.writeFileSync(devices, `devices:\n  "02:00:00:00:00:01": {"state":"pooled","fingerprint":null}\n  "02:00:00:00:00:02": {"state":"pooled","fingerprint":{"manufacturer":7}}\n  "02:00:00:00:00:03": {"state":"pooled","fingerprint":[1]}\n`);
    const d = new LedgerMap<DeviceRecord>(devices, 'devices', '', validateDevice, new FileSystem(), undefined, DEVICE_SEAL);
    expect(() => d.loadSync()).toThrow(`${devices}:4: "02:00:00:00:00:03": fingerprint must be a mapping`);
  });

  it('the grammar moves with the validators: a change to their code fails here until LEDGER_GRAMMAR is bumped (or the change shown not to matter) and this digest updated', () => {
    const code = [validateDevice, validateWorker, normalizeMac, normalizeId, isDeviceMac, keySha256, emptyFingerprint].map((f) => f.toString()).join('\n');
    expect({ grammar: LEDGER_GRAMMAR, code: createHash('sha256').update(code).digest('hex') }).toEqual({ grammar: 1, code: '5f90f39d974ca48d8569525ca39abfab9e9c2bf283425675beeba902464d9248' });
  });
});
