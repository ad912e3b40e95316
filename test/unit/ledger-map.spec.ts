import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { normalizeId, normalizeMac } from '../../src/shared/mac';
import { FileSystem } from '../../src/shared/files/file-system';
import { LedgerMap } from '../../src/shared/files/ledger-map';
import { newWorker, validateWorker, WorkerRecord } from '../../src/control-plane/repositories/ledger/records';

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
