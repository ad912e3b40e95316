/**
 * npm run bench:agent (root; needs btrfs-progs and tgt):
 *  1. Clone of a 10 GiB sparse master on a loop-mounted btrfs: reflink vs the sparse-copy
 *     fallback on the same data, ratio printed.
 *  2. 100 disks created concurrently from one master through the agent API on a real tgtd.
 */
import { ChildProcess, execFileSync, spawn } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { loadAgentConfig } from '../src/storage-agent/agent-config';
import { createAgentApp } from '../src/storage-agent/agent.factory';
import { ImageFs } from '../src/storage-agent/images/image-fs';
import { fmt, tmp } from './lib';

const BASE = 'iqn.2026-07.com.controller';

async function main() {
  const dir = tmp('kurrent-agent-bench-');
  const img = path.join(dir, 'btrfs.img');
  const mnt = path.join(dir, 'mnt');
  fs.mkdirSync(mnt);
  const fd0 = fs.openSync(img, 'w');
  fs.ftruncateSync(fd0, 16 * 2 ** 30);
  fs.closeSync(fd0);
  execFileSync('mkfs.btrfs', ['-q', '-f', img]);
  execFileSync('mount', ['-o', 'loop', img, mnt]);
  let tgtd: ChildProcess | null = null;
  try {
    const disks = path.join(mnt, 'images');
    fs.mkdirSync(disks);
    // A 10 GiB master, sparse, with 256 MiB of data spread over it (boot sector, OS, tail).
    const fd = fs.openSync(path.join(disks, '_tpl_bench.img'), 'w');
    fs.ftruncateSync(fd, 10 * 2 ** 30);
    const block = Buffer.alloc(16 << 20, 0x5a);
    for (let i = 0; i < 16; i++) fs.writeSync(fd, block, 0, block.length, i * 640 * 2 ** 20);
    fs.fsyncSync(fd);
    fs.closeSync(fd);
    const images = new ImageFs(disks);

    let t = performance.now();
    await images.reflink('_tpl_bench.img', 'reflink.img');
    const reflinkMs = performance.now() - t;
    t = performance.now();
    await images.sparseCopy('_tpl_bench.img', 'copy.img');
    const copyMs = performance.now() - t;
    const alloc = (f: string) => fs.statSync(path.join(disks, f)).blocks * 512;
    console.log('== Clone of a 10 GiB sparse master (256 MiB of data) on btrfs ==');
    console.log(`reflink (FICLONE)        : ${fmt(reflinkMs, 1)} ms`);
    console.log(`sparse copy (fallback)   : ${fmt(copyMs, 1)} ms, ${fmt(alloc('copy.img') / 2 ** 20)} MiB allocated`);
    console.log(`ratio copy / reflink     : ${fmt(copyMs / reflinkMs, 0)}x`);
    await images.remove('reflink.img');
    await images.remove('copy.img');

    // 100 concurrent creates through the agent on a real tgtd.
    const control = 5000 + (process.pid % 1000);
    tgtd = spawn('tgtd', ['-f', '-C', String(control), '--iscsi', `portal=127.0.0.1:${control + 10000}`], { stdio: 'ignore' });
    await new Promise((r) => setTimeout(r, 500));
    const app = await createAgentApp(
      loadAgentConfig({ IPXE_AGENT_BACKEND: 'stgt', IPXE_AGENT_TGT_CONTROL_PORT: String(control), DISK_DIR: disks, IPXE_AGENT_STATE_DIR: path.join(dir, 'state'), IPXE_AGENT_LOG_LEVEL: 'warn' }),
      { quiet: true },
    );
    await app.listen(0, '127.0.0.1');
    const url = await app.getUrl();
    t = performance.now();
    const results = await Promise.all(
      Array.from({ length: 100 }, (_, i) =>
        fetch(`${url.replace('[::1]', '127.0.0.1')}/luns/disk`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ iqn: `${BASE}:seat-${String(i).padStart(3, '0')}.ubuntu`, master: '_tpl_bench.img' }),
        }).then((r) => r.status),
      ),
    );
    const totalMs = performance.now() - t;
    const ok = results.filter((s) => s === 201).length;
    const targets = execFileSync('tgtadm', ['-C', String(control), '--lld', 'iscsi', '--mode', 'target', '--op', 'show'], { encoding: 'utf8' }).match(/^Target \d+:/gm)?.length ?? 0;
    console.log('\n== 100 disks from one master, concurrently, agent API on a real tgtd (btrfs reflink) ==');
    console.log(`total ${fmt(totalMs)} ms (target < 5,000 ms); ${ok} x 201, ${100 - ok} errors; tgtd holds ${targets} targets`);
    await app.close();
  } finally {
    if (tgtd && tgtd.exitCode === null) {
      const exited = new Promise((r) => tgtd!.once('exit', r));
      tgtd.kill('SIGKILL');
      await exited;
    }
    execFileSync('umount', [mnt]);
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
