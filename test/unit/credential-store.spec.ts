import * as fs from 'node:fs';
import * as path from 'node:path';
import { Clock } from '../../src/control-plane/common/clock';
import type { AppConfig } from '../../src/control-plane/config/app-config';
import type { AuditEntry } from '../../src/control-plane/repositories/audit/audit.repository';
import { FileAuditRepository } from '../../src/control-plane/repositories/audit/file-audit.repository';
import { CredentialRecord, FileShape, newPush, runOnView } from '../../src/control-plane/repositories/credentials/credential.repository';
import { FileCredentialRepository, readCredentialsFile, readCredentialsOnDisk, renderCredentialsFile, renderCredentialsInSlices } from '../../src/control-plane/repositories/credentials/file-credential.repository';
import { FileSystem } from '../../src/shared/files/file-system';
import { tempDir } from '../helpers/app';

// The file repository checks the secret's format (and CRC-32) when it reads the file.
const KEY = 'DHHC-1:00:nAqgGFD9wOUa9NfTGWiP5c4scW6J+VEh3D+0DypRaf7rWRas:';

const cred = (id: string, over: Partial<CredentialRecord> = {}): CredentialRecord => ({
  worker_id: id,
  hostnqn: `nqn.2014-08.org.nvmexpress:uuid:kurrent:host.${id}`,
  dhchap_key: KEY,
  issued_at: '2026-12-03T00:00:00.000Z',
  revoked: false,
  revoked_at: null,
  agents: {},
  ...over,
});

const shape = (n: number): FileShape => ({ version: 1, credentials: Object.fromEntries(Array.from({ length: n }, (_, i) => [`w${i}`, cred(`w${i}`)])), removals: [] });

describe('runOnView: a change costs what it touches', () => {
  it('clones only what fn reads, leaves the state alone, and returns exactly what changed', () => {
    const data = shape(1000);
    const before = JSON.stringify(data);
    const { r, delta } = runOnView(data, (d) => {
      d.credentials.w1.revoked = true;
      d.credentials.w2.agents.a = newPush();
      delete d.credentials.w3;
      d.credentials.wnew = cred('wnew');
      void d.credentials.w4.hostnqn; // read, not changed
      return d.credentials.w1.revoked;
    });
    expect(r).toBe(true);
    expect(JSON.stringify(data)).toBe(before);
    expect([...delta!.credentials.keys()].sort()).toEqual(['w1', 'w2', 'w3', 'wnew']);
    expect(delta!.credentials.get('w3')).toBeNull();
    expect(delta!.credentials.get('w1')!.revoked).toBe(true);
    expect(delta!.removals).toBeNull();
  });

  it('answers key listings and membership as the changed state would', () => {
    const data = shape(3);
    runOnView(data, (d) => {
      delete d.credentials.w0;
      d.credentials.w9 = cred('w9');
      expect(Object.keys(d.credentials).sort()).toEqual(['w1', 'w2', 'w9']);
      expect('w0' in d.credentials).toBe(false);
      expect('w9' in d.credentials).toBe(true);
      expect(Object.values(d.credentials).map((c) => c.worker_id).sort()).toEqual(['w1', 'w2', 'w9']);
      expect(d.credentials.missing).toBeUndefined();
    });
  });

  it('nothing changed: no delta; a replaced map (a store import) is compared key by key; removals as a whole', () => {
    const data = shape(3);
    expect(runOnView(data, (d) => d.credentials.w1.worker_id).delta).toBeNull();
    const imported = { w1: cred('w1'), w7: cred('w7') };
    const { delta } = runOnView(data, (d) => {
      d.credentials = imported;
      d.removals.push({ worker_id: 'w0', hostnqn: 'h', agent: 'a', attempts: 0, last_error: null, last_attempt_at: null, next_attempt_at: null });
    });
    expect(Object.fromEntries(delta!.credentials)).toEqual({ w0: null, w2: null, w7: cred('w7') });
    expect(delta!.removals).toHaveLength(1);
  });
});

describe('FileCredentialRepository: nvme-credentials.json and its log', () => {
  const dirs: string[] = [];
  const open = (dir: string, checkpointMs = 60_000) => {
    const r = new FileCredentialRepository({ stateDir: dir, checkpointMs } as AppConfig, new FileSystem());
    r.onModuleInit();
    return r;
  };
  const fresh = () => {
    const d = tempDir('kurrent-creds-');
    dirs.push(d);
    return d;
  };
  afterAll(() => dirs.forEach((d) => fs.rmSync(d, { recursive: true, force: true })));
  const jsonOf = (dir: string) => JSON.parse(fs.readFileSync(path.join(dir, 'nvme-credentials.json'), 'utf8')) as FileShape;
  const walBytes = (dir: string) => fs.statSync(path.join(dir, 'nvme-credentials.wal')).size;

  it('a change appends what it changed to the 0600 log and leaves the file; a restart replays it; a checkpoint folds it in', async () => {
    const dir = fresh();
    let repo = open(dir);
    await repo.change((d) => Object.assign(d.credentials, Object.fromEntries(Array.from({ length: 500 }, (_, i) => [`w${i}`, cred(`w${i}`)]))));
    await repo.checkpoint();
    const fileSize = fs.statSync(path.join(dir, 'nvme-credentials.json')).size;
    expect(walBytes(dir)).toBe(0);
    const mtime = fs.statSync(path.join(dir, 'nvme-credentials.json')).mtimeMs;

    await repo.change((d) => (d.credentials.w7.revoked = true));
    await repo.change((d) => delete d.credentials.w8);
    // One record per change, each the size of one credential, not of the fleet.
    expect(walBytes(dir)).toBeGreaterThan(0);
    expect(walBytes(dir)).toBeLessThan(fileSize / 100);
    expect(fs.statSync(path.join(dir, 'nvme-credentials.wal')).mode & 0o777).toBe(0o600);
    expect(fs.statSync(path.join(dir, 'nvme-credentials.json')).mtimeMs).toBe(mtime);
    expect(jsonOf(dir).credentials.w7.revoked).toBe(false);
    // What a restart would see, read without writing.
    const onDisk = readCredentialsOnDisk(dir, new FileSystem());
    expect(onDisk.credentials.w7.revoked).toBe(true);
    expect(onDisk.credentials.w8).toBeUndefined();
    expect(onDisk).toEqual(repo.snapshot());

    // A kill (no shutdown): the next start replays the log.
    repo = open(dir);
    expect(repo.get('w7')!.revoked).toBe(true);
    expect(repo.get('w8')).toBeUndefined();
    expect(repo.all()).toHaveLength(499);
    await repo.checkpoint();
    expect(walBytes(dir)).toBe(0);
    expect(jsonOf(dir)).toEqual(repo.snapshot());
  });

  it('notes are appended by one coalesced flush; the log is folded in once it passes a quarter of the file', async () => {
    const dir = fresh();
    const repo = open(dir);
    await repo.change((d) => Object.assign(d.credentials, Object.fromEntries(Array.from({ length: 200 }, (_, i) => [`w${i}`, cred(`w${i}`)]))));
    await repo.checkpoint();
    for (let i = 0; i < 50; i++) await repo.note((d) => (d.credentials[`w${i}`].agents.a = newPush()));
    await repo.flush();
    const afterFlush = readCredentialsOnDisk(dir, new FileSystem());
    expect(Object.keys(afterFlush.credentials.w49.agents)).toEqual(['a']);
    // Enough changes to pass a quarter of the file (and the 4 MiB floor: big records).
    const big = 'x'.repeat(200_000);
    for (let i = 0; i < 30 && walBytes(dir) > 0; i++) {
      await repo.change((d) => (d.credentials.w1.agents.a.last_error = `${big}${i}`));
      await repo.foldSettled();
    }
    expect(walBytes(dir)).toBe(0);
    expect(jsonOf(dir).credentials.w1.agents.a.last_error).toMatch(/^x+\d+$/);
  });

  it('the file of a fold beside the changes is the one renderCredentialsFile writes, whatever the number of slices', async () => {
    for (const n of [0, 1, 4999, 5000, 5001, 12_345]) {
      const d = shape(n);
      d.removals = [{ worker_id: 'w0', hostnqn: 'h', agent: 'a', attempts: 1, last_error: null, last_attempt_at: null, next_attempt_at: null }];
      expect(Buffer.concat(await renderCredentialsInSlices(Object.entries(d.credentials), d.removals)).toString('utf8')).toBe(renderCredentialsFile(d));
    }
  });

  it('a big log is folded beside the changes: they go on while the file is written, what they appended stays in the log, and an edit meanwhile is never written over', async () => {
    // The fold's write of nvme-credentials.json waits at a gate the test opens.
    let atGate: () => void = () => undefined;
    let reached = new Promise<void>((r) => (atGate = r));
    let open_: () => void = () => undefined;
    class GatedFs extends FileSystem {
      override async writeAtomic(file: string, data: string | Buffer, mode?: number, opts?: Parameters<FileSystem['writeAtomic']>[3]): Promise<void> {
        if (file.endsWith('nvme-credentials.json') && gated) {
          const gate = new Promise<void>((r) => (open_ = r));
          atGate();
          await gate;
        }
        return super.writeAtomic(file, data, mode, opts);
      }
      override readChunksSync(file: string, onChunk: (b: Buffer) => void): boolean {
        if (file.endsWith('nvme-credentials.json')) reads++;
        return super.readChunksSync(file, onChunk);
      }
    }
    let reads = 0;
    let gated = false;
    const dir = fresh();
    const repo = new FileCredentialRepository({ stateDir: dir, checkpointMs: 60_000 } as AppConfig, new GatedFs());
    repo.onModuleInit();
    await repo.change((d) => Object.assign(d.credentials, Object.fromEntries(Array.from({ length: 200 }, (_, i) => [`w${i}`, cred(`w${i}`)]))));
    await repo.checkpoint();
    gated = true;
    const big = 'x'.repeat(200_000);
    // Past the 4 MiB floor: the last of these starts the fold.
    for (let i = 0; i < 21; i++) await repo.change((d) => (d.credentials.w1.agents = { a: { ...newPush(), last_error: `${big}${i}` } }));
    await reached;
    const logWhileFolding = walBytes(dir);
    // The fold is writing the file: changes are not held up by it.
    await repo.change((d) => (d.credentials.w2.revoked = true));
    await repo.change((d) => delete d.credentials.w3);
    expect(walBytes(dir)).toBeGreaterThan(logWhileFolding);
    open_();
    await repo.foldSettled();
    // The file holds the state the fold took; the log, exactly the two changes made since.
    const file = jsonOf(dir);
    expect(file.credentials.w1.agents.a.last_error).toBe(`${big}20`);
    expect(file.credentials.w2.revoked).toBe(false);
    expect(file.credentials.w3).toBeDefined();
    expect(walBytes(dir)).toBeLessThan(10_000);
    // The stamp of the file the fold put in place is known before the rename: no change reads it again as a hand edit.
    await repo.change((d) => (d.credentials.w5.revoked = true));
    expect(reads).toBe(1);
    const restarted = open(dir);
    expect(restarted.snapshot()).toEqual(repo.snapshot());
    expect(restarted.get('w2')!.revoked).toBe(true);
    expect(restarted.get('w3')).toBeUndefined();
    expect(restarted.get('w5')!.revoked).toBe(true);

    // A hand edit while the fold writes: it is not written over, and the next fold keeps it with the log on top.
    reached = new Promise<void>((r) => (atGate = r));
    for (let i = 0; i < 21; i++) await repo.change((d) => (d.credentials.w1.agents = { a: { ...newPush(), last_error: `${big}${i}b` } }));
    await reached;
    const edited = jsonOf(dir);
    edited.credentials.w4.revoked = true;
    fs.writeFileSync(path.join(dir, 'nvme-credentials.json'), JSON.stringify(edited, null, 2));
    open_();
    await repo.foldSettled();
    expect(jsonOf(dir).credentials.w4.revoked).toBe(true);
    expect(jsonOf(dir).credentials.w1.agents.a.last_error).toBe(`${big}20`);
    gated = false;
    await repo.checkpoint();
    const after = jsonOf(dir);
    expect([after.credentials.w4.revoked, after.credentials.w2.revoked, after.credentials.w1.agents.a.last_error]).toEqual([true, true, `${big}20b`]);
    expect(walBytes(dir)).toBe(0);
  });

  it('a hand edit of the file meanwhile is kept, with the changes of the log on top', async () => {
    const dir = fresh();
    const repo = open(dir);
    await repo.change((d) => {
      d.credentials.w1 = cred('w1');
      d.credentials.w2 = cred('w2');
    });
    await repo.checkpoint();
    await repo.change((d) => (d.credentials.w1.revoked = true)); // in the log only
    const edited = jsonOf(dir);
    edited.credentials.w2.revoked = true; // by hand, in the file
    fs.writeFileSync(path.join(dir, 'nvme-credentials.json'), JSON.stringify(edited, null, 2));
    await repo.change((d) => (d.credentials.w3 = cred('w3')));
    expect([repo.get('w1')!.revoked, repo.get('w2')!.revoked, !!repo.get('w3')]).toEqual([true, true, true]);
    await repo.checkpoint();
    const file = jsonOf(dir);
    expect([file.credentials.w1.revoked, file.credentials.w2.revoked, !!file.credentials.w3]).toEqual([true, true, true]);
  });
});

describe('FileCredentialRepository: a change and its audit entries are one commit', () => {
  const dirs: string[] = [];
  afterAll(() => dirs.forEach((d) => fs.rmSync(d, { recursive: true, force: true })));

  /** A FileSystem whose appends to operations.jsonl fail while `full` is set (ENOSPC): the entries stay queued in memory. */
  class FullAuditDisk extends FileSystem {
    full = false;
    override appendDurable(file: string, data: string | Buffer, mode?: number): Promise<void> {
      if (this.full && path.basename(file) === 'operations.jsonl') return Promise.reject(Object.assign(new Error('ENOSPC: no space left on device'), { code: 'ENOSPC' }));
      return super.appendDurable(file, data, mode);
    }
  }
  const open = async (dir: string, disk: FileSystem) => {
    const config = { stateDir: dir, checkpointMs: 60_000 } as AppConfig;
    const audit = new FileAuditRepository(config, disk, new Clock());
    const repo = new FileCredentialRepository(config, disk, audit);
    await audit.onModuleInit();
    repo.onModuleInit();
    return { audit, repo };
  };
  const trail = (dir: string) =>
    fs
      .readFileSync(path.join(dir, 'operations.jsonl'), 'utf8')
      .split('\n')
      .filter(Boolean)
      .map((l) => JSON.parse(l) as AuditEntry);
  const walRecords = (dir: string) =>
    fs
      .readFileSync(path.join(dir, 'nvme-credentials.wal'), 'utf8')
      .split('\n')
      .filter(Boolean)
      .map((l) => JSON.parse(l.slice(l.indexOf('{'))) as { a?: AuditEntry[] });

  it('the entries travel in the log record, reach operations.jsonl after it, and a start after a kill recovers them in id order with the ledger\'s', async () => {
    const dir = tempDir('kurrent-creds-audit-');
    dirs.push(dir);
    const disk = new FullAuditDisk();
    const { audit, repo } = await open(dir, disk);
    await repo.change((d, a) => {
      d.credentials.w1 = cred('w1');
      a('credential.issue', { worker_id: 'w1', client: 'test' });
    });
    expect(trail(dir).map((e) => [e.id, e.op, e.worker_id])).toEqual([[1, 'credential.issue', 'w1']]);
    expect(walRecords(dir).map((r) => r.a?.map((e) => e.id))).toEqual([[1]]);

    // The disk refuses the trail: a ledger commit reserves id 2, a rotation takes id 3 and is committed.
    disk.full = true;
    const ledgerEntries = audit.reserve([{ op: 'worker.create', fields: { worker_id: 'w2' } }]);
    const rotated = repo.change((d, a) => {
      d.credentials.w1.dhchap_key = KEY;
      d.credentials.w1.issued_at = '2026-12-04T00:00:00.000Z';
      a('credential.rotate', { worker_id: 'w1', client: 'test' });
    });
    void audit.fill(ledgerEntries);
    await rotated;
    expect(trail(dir).map((e) => e.id)).toEqual([1]);
    // The log is the only copy of entry 3: it is not folded away.
    await expect(repo.checkpoint()).rejects.toThrow(/not yet in operations\.jsonl/);
    expect(walRecords(dir).map((r) => r.a?.map((e) => e.id))).toEqual([[1], [3]]);

    // A kill: nothing of memory survives (the dead process's retry timer goes, its disk still full). The ledger's start recovers its entry 2 and, in the same
    // call, the credential log's 3, in id order; a second start adds nothing.
    await audit.onApplicationShutdown();
    for (let start = 0; start < 2; start++) {
      const next = await open(dir, new FileSystem());
      expect(await next.audit.recover(start === 0 ? ledgerEntries : [])).toBe(start === 0 ? 2 : 0);
      expect(next.repo.get('w1')!.issued_at).toBe('2026-12-04T00:00:00.000Z');
      expect(trail(dir).map((e) => [e.id, e.op])).toEqual([
        [1, 'credential.issue'],
        [2, 'worker.create'],
        [3, 'credential.rotate'],
        ...(start === 1 ? [[4, 'device.create']] : []),
      ]);
      // New ids go on after the recovered ones; once they are written the log may be folded.
      const e = await next.audit.record('device.create', {});
      expect(e.id).toBe(4 + start);
      await next.repo.checkpoint();
      await next.audit.onApplicationShutdown();
    }
    expect(fs.statSync(path.join(dir, 'nvme-credentials.wal')).size).toBe(0);
  });

  it('a change that changes nothing still records its entries; a failed log write records none and changes nothing', async () => {
    const dir = tempDir('kurrent-creds-audit-');
    dirs.push(dir);
    const disk = new FileSystem();
    const { repo } = await open(dir, disk);
    await repo.change((_d, a) => a('credential.revoke', { worker_id: 'w9', client: 'test' }));
    expect(trail(dir).map((e) => e.op)).toEqual(['credential.revoke']);
    // A log the disk refuses: the change fails, and with it its entry.
    const failing = new (class extends FileSystem {
      override appendDurable(file: string, data: string | Buffer, mode?: number): Promise<void> {
        if (path.basename(file) === 'nvme-credentials.wal') return Promise.reject(Object.assign(new Error('EIO: i/o error'), { code: 'EIO' }));
        return super.appendDurable(file, data, mode);
      }
    })();
    const { audit: audit2, repo: repo2 } = await open(dir, failing);
    await expect(
      repo2.change((d, a) => {
        d.credentials.w5 = cred('w5');
        a('credential.issue', { worker_id: 'w5', client: 'test' });
      }),
    ).rejects.toThrow();
    expect(repo2.get('w5')).toBeUndefined();
    // The cancelled id is skipped; the trail holds no entry of the failed change.
    const later = await audit2.record('device.create', {});
    expect(trail(dir).map((e) => [e.id, e.op])).toEqual([
      [1, 'credential.revoke'],
      [later.id, 'device.create'],
    ]);
  });
});

describe('nvme-credentials.json: one credential a line, read as it is read from disk', () => {
  const dir = tempDir('kurrent-creds-file-');
  const file = path.join(dir, 'nvme-credentials.json');
  afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));
  // ~2 MB: entries cut by the reader's 1 MiB chunks.
  const big: FileShape = {
    ...shape(8000),
    removals: [{ worker_id: 'gone', hostnqn: 'nqn.2014-08.org.nvmexpress:uuid:kurrent:host.gone', agent: 'a1', attempts: 2, last_error: 'agent unreachable', last_attempt_at: null, next_attempt_at: null }],
  };

  it('what is written is JSON, one credential a line, and reads back the same (empty too)', () => {
    for (const d of [big, shape(0), shape(1)]) {
      const text = renderCredentialsFile(d);
      expect(JSON.parse(text)).toEqual(d);
      expect(text.split('\n').filter((l) => l.startsWith('    "'))).toHaveLength(Object.keys(d.credentials).length);
      fs.writeFileSync(file, text);
      expect(readCredentialsFile(file, new FileSystem())).toEqual(d);
    }
    expect(fs.statSync(file).size).toBeLessThan(1024 * 1024);
    fs.writeFileSync(file, renderCredentialsFile(big));
    expect(fs.statSync(file).size).toBeGreaterThan(1.5 * 1024 * 1024);
    // Read in one pass, never as one whole text.
    const files = new FileSystem();
    const whole = jest.spyOn(files, 'readTextSync');
    expect(readCredentialsFile(file, files)).toEqual(big);
    expect(whole).not.toHaveBeenCalled();
  });

  it('any other JSON layout reads the same; what is not JSON is refused as before, naming no value', () => {
    fs.writeFileSync(file, JSON.stringify(big, null, 2));
    const files = new FileSystem();
    const whole = jest.spyOn(files, 'readTextSync');
    expect(readCredentialsFile(file, files)).toEqual(big);
    expect(whole).toHaveBeenCalledTimes(1);
    fs.writeFileSync(file, JSON.stringify(big));
    expect(readCredentialsFile(file, new FileSystem())).toEqual(big);
    const lines = renderCredentialsFile(big).split('\n');
    const at = lines.findIndex((l) => l.startsWith('    "w5000"'));
    // A missing comma deep in the file, and a trailing one before the closing line.
    for (const broken of [
      [...lines.slice(0, at), lines[at].replace(/,$/, ''), ...lines.slice(at + 1)],
      [...lines.slice(0, lines.length - 4), `${lines[lines.length - 4]},`, ...lines.slice(lines.length - 3)],
    ]) {
      fs.writeFileSync(file, broken.join('\n'));
      expect(() => readCredentialsFile(file, new FileSystem())).toThrow(/invalid JSON/);
    }
    const bad = [...lines.slice(0, at), lines[at].replace(KEY, 'DHHC-1:00:AAAA:'), ...lines.slice(at + 1)];
    fs.writeFileSync(file, bad.join('\n'));
    expect(() => readCredentialsFile(file, new FileSystem())).toThrow(`${file}:1: credentials.w5000.dhchap_key is not a DHHC-1 secret`);
    const noNqn = [...lines.slice(0, at), lines[at].replace(/"hostnqn":"[^"]*",/, ''), ...lines.slice(at + 1)];
    expect(noNqn[at]).not.toContain('hostnqn');
    fs.writeFileSync(file, noNqn.join('\n'));
    expect(() => readCredentialsFile(file, new FileSystem())).toThrow(`${file}:1: credentials.w5000.hostnqn is missing`);
    // An own "__proto__" entry stays an entry (and is then checked like any other).
    const proto = [...lines.slice(0, at), lines[at].replace('"w5000"', '"__proto__"'), ...lines.slice(at + 1)];
    fs.writeFileSync(file, proto.join('\n'));
    const read = readCredentialsFile(file, new FileSystem());
    expect(Object.prototype.hasOwnProperty.call(read.credentials, '__proto__')).toBe(true);
    expect(Object.getPrototypeOf(read.credentials)).toBe(Object.prototype);
  });
});
