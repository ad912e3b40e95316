import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { FileChangedError, FileSystem } from '../../src/shared/files/file-system';

/** The real FileSystem on a temp directory: the one write that is not a plain rename. */
describe('FileSystem.replaceViaLink', () => {
  let dir: string;
  beforeEach(() => (dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kurrent-fs-'))));
  afterEach(() => fs.rmSync(dir, { recursive: true, force: true }));
  const names = () => fs.readdirSync(dir).sort();

  it('points the file at a new data file each time and removes the previous one; a regular file is replaced', async () => {
    const fsys = new FileSystem();
    const file = path.join(dir, 'hosts.conf');
    fs.writeFileSync(file, 'old regular file\n');
    await fsys.replaceViaLink(file, Buffer.from('one\n'));
    expect(fs.readFileSync(file, 'utf8')).toBe('one\n');
    expect(fs.lstatSync(file).isSymbolicLink()).toBe(true);
    const first = fs.readlinkSync(file);
    expect(first).toMatch(/^\.hosts\.conf\.\d+\.\d+\.data$/);
    await fsys.replaceViaLink(file, Buffer.from('two\n'));
    expect(fs.readFileSync(file, 'utf8')).toBe('two\n');
    expect(fs.readlinkSync(file)).not.toBe(first);
    expect(names()).toEqual([fs.readlinkSync(file), 'hosts.conf'].sort());
    await fsys.syncLinked(file);
    expect(fs.readFileSync(file, 'utf8')).toBe('two\n');
  });

  it('writes content larger than one write of FileHandle.writeFile (512 KiB) byte for byte, mode 0644; strings as UTF-8 through every writer', async () => {
    const fsys = new FileSystem();
    const file = path.join(dir, 'hosts.conf');
    // dhcp-hosts.conf at 100,000 bindings is ~2.9 MB.
    const big = Buffer.from(Array.from({ length: 100_000 }, (_, i) => `02:00:00:${String(i).padStart(6, '0').replace(/(..)(..)(..)/, '$1:$2:$3')},seat-${i}\n`).join(''));
    expect(big.length).toBeGreaterThan(2 * 1024 * 1024);
    await fsys.replaceViaLink(file, big);
    expect(fs.readFileSync(file).equals(big)).toBe(true);
    expect(fs.statSync(file).mode & 0o777).toBe(0o644);
    const text = `é€😀\n`.repeat(200_000);
    await fsys.writeAtomic(path.join(dir, 'a.txt'), text);
    await fsys.appendDurable(path.join(dir, 'a.txt'), text);
    expect(fs.readFileSync(path.join(dir, 'a.txt'), 'utf8')).toBe(text + text);
    const w = await fsys.openAtomic(path.join(dir, 'b.txt'));
    await w.write(text);
    await w.write(big);
    await w.commit();
    expect(fs.readFileSync(path.join(dir, 'b.txt')).equals(Buffer.concat([Buffer.from(text), big]))).toBe(true);
  });

  it('at start, data files the link does not name are removed, the one it names is kept', async () => {
    const fsys = new FileSystem();
    const file = path.join(dir, 'hosts.conf');
    await fsys.replaceViaLink(file, Buffer.from('current\n'));
    fs.writeFileSync(path.join(dir, '.hosts.conf.99999.7.data'), 'left by a kill\n');
    fs.writeFileSync(path.join(dir, '.other.conf.99999.7.data'), 'not ours\n');
    expect(fsys.removeStaleLinkData(file)).toEqual(['.hosts.conf.99999.7.data']);
    expect(fs.readFileSync(file, 'utf8')).toBe('current\n');
    expect(names()).toEqual([fs.readlinkSync(file), '.other.conf.99999.7.data', 'hosts.conf'].sort());
  });

  it('a failed write leaves the old content and no stray file', async () => {
    const fsys = new FileSystem();
    const file = path.join(dir, 'hosts.conf');
    await fsys.replaceViaLink(file, Buffer.from('kept\n'));
    const before = names();
    fsys.faultHook = (p) => {
      if (p === 'written:hosts.conf') throw Object.assign(new Error('ENOSPC'), { code: 'ENOSPC' });
    };
    await expect(fsys.replaceViaLink(file, Buffer.from('lost\n'))).rejects.toMatchObject({ path: file });
    expect(fs.readFileSync(file, 'utf8')).toBe('kept\n');
    expect(names()).toEqual(before);
  });
});

describe('FileSystem.readChunksSync', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kurrent-fs-chunks-'));
  afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

  it('hands the file front to back in chunks of one reused buffer; a missing file is false', () => {
    const file = path.join(dir, 'big');
    const bytes = Buffer.from(Array.from({ length: 10_000 }, (_, i) => i % 251));
    fs.writeFileSync(file, bytes);
    const got: Buffer[] = [];
    const buffers = new Set<ArrayBuffer>();
    expect(
      new FileSystem().readChunksSync(
        file,
        (c) => {
          buffers.add(c.buffer as ArrayBuffer);
          got.push(Buffer.from(c));
        },
        4096,
      ),
    ).toBe(true);
    expect(got.map((c) => c.length)).toEqual([4096, 4096, 1808]);
    expect(Buffer.concat(got).equals(bytes)).toBe(true);
    expect(buffers.size).toBe(1);
    expect(new FileSystem().readChunksSync(path.join(dir, 'missing'), () => undefined)).toBe(false);
  });
});

describe('FileSystem.writeAtomic', () => {
  let dir: string;
  beforeEach(() => (dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kurrent-fs-'))));
  afterEach(() => fs.rmSync(dir, { recursive: true, force: true }));

  it('writes a list of parts in order (more than one writev, empty parts too), and tells the stamp the file has once renamed', async () => {
    const fsys = new FileSystem();
    const file = path.join(dir, 'big.yml');
    const parts = Array.from({ length: 150 }, (_, i) => Buffer.from(i % 7 === 0 ? '' : `${i}:${'é'.repeat(i)}\n`));
    let told: ReturnType<FileSystem['statSync']> = null;
    await fsys.writeAtomic(file, parts, 0o600, { beforeRename: (st) => (told = st) });
    expect(fs.readFileSync(file)).toEqual(Buffer.concat(parts));
    expect(fs.statSync(file).mode & 0o777).toBe(0o600);
    expect(told).toEqual(fsys.statSync(file));
    expect(fs.readdirSync(dir)).toEqual(['big.yml']);
  });

  it('openAtomic: a durable commit renames what was written piece by piece, tells the stamp first, and refuses a file edited meanwhile (temp removed)', async () => {
    const fsys = new FileSystem();
    const file = path.join(dir, 'devices.yml');
    fs.writeFileSync(file, 'old\n');
    const since = fsys.statSync(file);
    const w = await fsys.openAtomic(file, 0o600);
    for (const part of ['a\n', 'b\n', 'c\n']) await w.write(Buffer.from(part));
    // Not in place until the commit.
    expect(fs.readFileSync(file, 'utf8')).toBe('old\n');
    let told: ReturnType<FileSystem['statSync']> = null;
    await w.commit({ durable: true, unchangedSince: since, beforeRename: (st) => (told = st) });
    expect(fs.readFileSync(file, 'utf8')).toBe('a\nb\nc\n');
    expect(told).toEqual(fsys.statSync(file));
    expect(fs.statSync(file).mode & 0o777).toBe(0o600);
    // A hand edit between the open and the commit: never written over.
    const before = fsys.statSync(file);
    const w2 = await fsys.openAtomic(file);
    await w2.write('new\n');
    fs.writeFileSync(file, 'edited by hand, longer\n');
    await expect(w2.commit({ durable: true, unchangedSince: before })).rejects.toBeInstanceOf(FileChangedError);
    expect(fs.readFileSync(file, 'utf8')).toBe('edited by hand, longer\n');
    expect(fs.readdirSync(dir)).toEqual(['devices.yml']);
  });
});
