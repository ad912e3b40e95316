import * as fs from 'node:fs';
import * as path from 'node:path';
import type { AppConfig } from '../../src/control-plane/config/app-config';
import { CredentialRecord, FileShape, newPush, runOnView } from '../../src/control-plane/repositories/credentials/credential.repository';
import { FileCredentialRepository, readCredentialsOnDisk } from '../../src/control-plane/repositories/credentials/file-credential.repository';
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
    for (let i = 0; i < 30 && walBytes(dir) > 0; i++) await repo.change((d) => (d.credentials.w1.agents.a.last_error = `${big}${i}`));
    expect(walBytes(dir)).toBe(0);
    expect(jsonOf(dir).credentials.w1.agents.a.last_error).toMatch(/^x+\d+$/);
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
