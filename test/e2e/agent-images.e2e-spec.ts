import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { makeFile, startAgent, TestAgent, useLoopMount } from '../helpers/agent';
import { tempDir } from '../helpers/app';

const NQN = 'nqn.2026-07.com.controller';
const usedBytes = (dir: string) => {
  const s = fs.statfsSync(dir);
  return (s.blocks - s.bfree) * s.bsize;
};
const sha = (f: string) => createHash('sha256').update(fs.readFileSync(f)).digest('hex');

describe('images: reflink clones on btrfs, sparse copies elsewhere', () => {
  let a: TestAgent | undefined;
  afterEach(async () => {
    await a?.close();
    a = undefined;
  });

  describe('on a loop-mounted btrfs', () => {
    const mnt = useLoopMount('kurrent-btrfs-', 2 * 2 ** 30, ['mkfs.btrfs', '-q', '-f']);

    it('clones a 1 GiB master without growing used space, and says so in capabilities', async () => {
      const disks = path.join(mnt, 'images');
      fs.mkdirSync(disks);
      // 1 GiB of real (non-zero) data, so a copy would have to allocate it all.
      const fd = fs.openSync(path.join(disks, '_tpl_big.img'), 'w');
      const block = Buffer.alloc(16 << 20, 0xab);
      for (let i = 0; i < 64; i++) {
        block.writeUInt32LE(i, 0);
        fs.writeSync(fd, block);
      }
      fs.fsyncSync(fd);
      fs.closeSync(fd);
      execFileSync('sync');
      a = await startAgent({ IPXE_AGENT_BACKEND: 'nvmet', IPXE_AGENT_CONFIGFS_ROOT: path.join(tempDir('kurrent-nvmet-'), 'nvmet'), DISK_DIR: disks }, tempDir());
      expect((await a.req('GET', '/capabilities')).body).toMatchObject({ fs_type: 'btrfs', clone: 'reflink (FICLONE)' });
      const before = usedBytes(mnt);
      const r = await a.req('POST', '/luns/disk', { iqn: `${NQN}:w1.abcdefabcdef`, master: '_tpl_big.img' });
      expect(r.status).toBe(201);
      execFileSync('sync');
      const grown = usedBytes(mnt) - before;
      expect(grown).toBeLessThan(16 << 20); // a copy would be 1 GiB
      expect(sha(r.body.backing)).toBe(sha(path.join(disks, '_tpl_big.img')));
    });
  });

  describe('on a small loop-mounted ext4 (1 KiB blocks, extents: files up to 4 TiB)', () => {
    const mnt = useLoopMount('kurrent-ext4-', 64 << 20, ['mkfs.ext4', '-q', '-F', '-b', '1024']);

    it('refuses a size the filesystem cannot hold before writing anything; a scan never exports debris', async () => {
      const disks = path.join(mnt, 'images');
      fs.mkdirSync(disks);
      // Debris of an old failed create (a 0-byte image) and of a killed build (a partial dot-file).
      fs.writeFileSync(path.join(disks, 'w0.abcdefabcdef.img'), '');
      fs.writeFileSync(path.join(disks, '.w9.abcdefabcdef.img.creating-1-1'), 'x');
      a = await startAgent({ IPXE_AGENT_BACKEND: 'nvmet', IPXE_AGENT_CONFIGFS_ROOT: path.join(tempDir('kurrent-nvmet-'), 'nvmet'), DISK_DIR: disks }, tempDir());
      const caps = (await a.req('GET', '/capabilities')).body;
      expect(caps.fs_type).toBe('ext4');
      expect(caps.max_file_size).toBeGreaterThan(4 * 2 ** 40 - 2 ** 20);
      expect(caps.max_file_size).toBeLessThan(4 * 2 ** 40);
      expect(fs.readdirSync(disks).sort()).toEqual(['.masters', 'w0.abcdefabcdef.img']); // the partial build was swept
      expect((await a.req('GET', '/luns')).body).toEqual([]); // and the 0-byte image not exported

      for (const size of ['64T', '5T']) {
        const r = await a.req('POST', '/luns/disk', { iqn: `${NQN}:w1.abcdefabcdef`, size });
        expect(r.status).toBe(400);
        expect(r.body.message).toMatch(/^size: .* is larger than the largest file the ext4 filesystem of DISK_DIR can hold \(\d+ bytes, 4T\)$/);
        expect(fs.readdirSync(disks).sort()).toEqual(['.masters', 'w0.abcdefabcdef.img']);
      }
      // The retry with a size that fits works (no 409 from a leftover).
      const ok = await a.req('POST', '/luns/disk', { iqn: `${NQN}:w1.abcdefabcdef`, size: '3T' });
      expect(ok.status).toBe(201);
      const scan = (await a.req('POST', '/luns/scan')).body;
      expect(scan.created).toEqual([]);
      expect(scan.skipped).toEqual(
        expect.arrayContaining([{ iqn: `${NQN}:w0.abcdefabcdef`, reason: 'backing file smaller than 1 MiB (0 bytes), not a disk: w0.abcdefabcdef.img' }]),
      );
      expect((await a.req('GET', '/luns')).body.map((t: any) => t.nqn)).toEqual([`${NQN}:w1.abcdefabcdef`]);
    });

    it('a copy that cannot fit (no reflink on ext4) is a 507 and leaves nothing: the version of the master, then the disk', async () => {
      const disks = path.join(mnt, 'images2');
      fs.mkdirSync(disks);
      const fill = (name: string, mib: number) => {
        const fd = fs.openSync(path.join(disks, name), 'w');
        for (let i = 0; i < mib; i++) fs.writeSync(fd, Buffer.alloc(1 << 20, i + 1));
        fs.closeSync(fd);
      };
      // 40 MiB of real data: the master itself fits in the 64 MiB filesystem, its version (a copy without reflink) does not.
      fill('_tpl_full.img', 40);
      a = await startAgent({ IPXE_AGENT_BACKEND: 'nvmet', IPXE_AGENT_CONFIGFS_ROOT: path.join(tempDir('kurrent-nvmet-'), 'nvmet'), DISK_DIR: disks }, tempDir());
      const r = await a.req('POST', '/luns/disk', { iqn: `${NQN}:w2.abcdefabcdef`, master: '_tpl_full.img' });
      expect(r.status).toBe(507);
      expect(r.body.message).toMatch(/^DISK_DIR is too full for a copy of _tpl_full\.img: it needs 40M, .* free \(no reflink here, so each version of a master is a copy\); nothing was created$/);
      expect(fs.readdirSync(disks).sort()).toEqual(['.masters', '_tpl_full.img']);
      expect(fs.readdirSync(path.join(disks, '.masters', '_tpl_full.img'))).toEqual([]);
      expect((await a.req('GET', '/luns')).body).toEqual([]);
      // 25 MiB: the version fits (50 MiB used), a disk cloned from it (a third copy) does not.
      fs.rmSync(path.join(disks, '_tpl_full.img'));
      fill('_tpl_full.img', 25);
      const r2 = await a.req('POST', '/luns/disk', { iqn: `${NQN}:w2.abcdefabcdef`, master: '_tpl_full.img' });
      expect(r2.status).toBe(507);
      expect(r2.body.message).toMatch(/^DISK_DIR is too full for a copy of .*_tpl_full\.img.*: it needs 25M, .* free \(no reflink here\); nothing was created$/);
      expect(fs.readdirSync(disks).sort()).toEqual(['.masters', '_tpl_full.img']);
      expect((await a.req('GET', '/masters')).body).toEqual([expect.objectContaining({ name: '_tpl_full.img', latest: 1, versions: [expect.objectContaining({ version: 1, size: 25 << 20, origin: 'drop' })] })]);
      expect((await a.req('GET', '/luns')).body).toEqual([]);
    });
  });

  it('on ext4/tmpfs the fallback copy keeps holes and the data', async () => {
    const d = tempDir();
    a = await startAgent({ IPXE_AGENT_BACKEND: 'nvmet', IPXE_AGENT_CONFIGFS_ROOT: path.join(d, 'nvmet') }, d);
    const caps = (await a.req('GET', '/capabilities')).body;
    if (caps.fs_type === 'btrfs' || caps.fs_type === 'xfs') throw new Error(`this test needs a non-reflink tmp dir, got ${caps.fs_type}`);
    expect(caps.clone).toBe(`sparse copy (no reflink on ${caps.fs_type})`);
    const master = path.join(a.diskDir, '_tpl_sparse.img');
    makeFile(master, 256 << 20, [
      { offset: 0, bytes: Buffer.alloc(4096, 1) },
      { offset: 100 << 20, bytes: Buffer.alloc(1 << 20, 2) },
      { offset: (256 << 20) - 4096, bytes: Buffer.alloc(4096, 3) },
    ]);
    const r = await a.req('POST', '/luns/disk', { iqn: `${NQN}:w2.abcdefabcdef`, master: '_tpl_sparse.img' });
    expect(r.status).toBe(201);
    const st = fs.statSync(r.body.backing);
    expect(st.size).toBe(256 << 20);
    expect(st.blocks * 512).toBeLessThanOrEqual(4 << 20); // not 256 MiB
    expect(sha(r.body.backing)).toBe(sha(master));
    const e = await a.req('POST', '/luns/disk', { iqn: `${NQN}:w3.abcdefabcdef`, size: '1T' });
    expect(e.status).toBe(201);
    expect(fs.statSync(e.body.backing)).toMatchObject({ size: 2 ** 40, blocks: 0 });
  });
});
