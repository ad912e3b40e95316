/**
 * npm run bench:agent (root; needs btrfs-progs and tgt):
 *  1. Clone of a 10 GiB sparse master on a loop-mounted btrfs: reflink vs the sparse-copy
 *     fallback on the same data, ratio printed.
 *  2. 100 disks created concurrently from one master through the agent API on a real tgtd.
 *  3. Those 100 disks, written to, restored to the master at once (reset mode, POST /luns/reset),
 *     as a ratio to step 2 in the same run.
 *  4. A version 2 of the master dropped in (the time until it is a version: scan, reflink
 *     snapshot, SHA-256 of the 10 GiB), then rolled out to the 100 disks at once (each restored to
 *     version 2), beside one full copy of the master (step 1's sparse copy).
 */
import { ChildProcess, execFileSync, spawn } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { loadAgentConfig } from '../src/storage-agent/agent-config';
import { createAgentApp } from '../src/storage-agent/agent.factory';
import { ImageFs } from '../src/storage-agent/images/image-fs';
import { fmt, mountBtrfs, tmp } from './lib';

const BASE = 'iqn.2026-07.com.controller';

async function main() {
  const dir = tmp('kurrent-agent-bench-');
  const mnt = mountBtrfs(dir, 16 * 2 ** 30);
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
    const alloc100 = alloc('copy.img');
    await images.remove('reflink.img');
    await images.remove('copy.img');

    // 100 concurrent creates through the agent on a real tgtd.
    const control = 5000 + (process.pid % 1000);
    tgtd = spawn('tgtd', ['-f', '-C', String(control), '--iscsi', `portal=127.0.0.1:${control + 10000}`], { stdio: 'ignore' });
    await new Promise((r) => setTimeout(r, 500));
    const agentStart = performance.now();
    const app = await createAgentApp(
      loadAgentConfig({
        IPXE_AGENT_BACKEND: 'stgt',
        IPXE_AGENT_TGT_CONTROL_PORT: String(control),
        DISK_DIR: disks,
        IPXE_AGENT_STATE_DIR: path.join(dir, 'state'),
        IPXE_AGENT_LOG_LEVEL: 'warn',
        IPXE_AGENT_MASTER_SCAN_SECONDS: '1',
        IPXE_AGENT_MASTER_SETTLE_SECONDS: '0',
      }),
      { quiet: true },
    );
    await app.listen(0, '127.0.0.1');
    const listenMs = performance.now() - agentStart;
    const url = (await app.getUrl()).replace('[::1]', '127.0.0.1');
    /** Until the agent holds version n of the master; ms it took. */
    const versionTaken = async (n: number) => {
      const t0 = performance.now();
      for (;;) {
        const m = ((await (await fetch(`${url}/masters`)).json()) as { name: string; latest: number | null }[]).find((x) => x.name === '_tpl_bench.img');
        if (m?.latest === n) return performance.now() - t0;
        await new Promise((r) => setTimeout(r, 50));
      }
    };
    await versionTaken(1);
    // The agent listens at once; its first scan takes the new master as a version in the background.
    console.log(`\n== The master as version 1 (reflink snapshot + SHA-256 of 10 GiB, the agent's first scan, in the background) ==\nagent listening after ${fmt(listenMs)} ms; version 1 held after ${fmt(performance.now() - agentStart)} ms`);
    t = performance.now();
    const results = await Promise.all(
      Array.from({ length: 100 }, (_, i) =>
        fetch(`${url}/luns/disk`, {
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

    // 100 seats in reset mode booting at once: each disk written to (as a day in a café does),
    // then all restored to the master through the agent at the same time (issue 26).
    const scribble = Buffer.alloc(16 << 20, 0xa5);
    for (let i = 0; i < 100; i++) {
      const f = fs.openSync(path.join(disks, `seat-${String(i).padStart(3, '0')}.ubuntu.img`), 'r+');
      fs.writeSync(f, scribble, 0, scribble.length, 0);
      fs.closeSync(f);
    }
    execFileSync('sync');
    t = performance.now();
    const resets = await Promise.all(
      Array.from({ length: 100 }, (_, i) =>
        fetch(`${url}/luns/reset`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ iqn: `${BASE}:seat-${String(i).padStart(3, '0')}.ubuntu`, master: '_tpl_bench.img' }),
        }).then(async (r) => ({ status: r.status, ms: ((await r.json()) as { ms?: number }).ms ?? NaN })),
      ),
    );
    const resetMs = performance.now() - t;
    const each = resets.map((r) => r.ms).sort((x, y) => x - y);
    const head = Buffer.alloc(64);
    const f42 = fs.openSync(path.join(disks, 'seat-042.ubuntu.img'), 'r');
    fs.readSync(f42, head, 0, 64, 0);
    fs.closeSync(f42);
    const restored = head.equals(Buffer.alloc(64, 0x5a));
    console.log('\n== 100 reset-mode disks restored at once (POST /luns/reset, reflink in place), after 16 MiB written to each ==');
    console.log(`total ${fmt(resetMs)} ms; ${resets.filter((r) => r.status === 200).length} x 200; one reflink p50 ${fmt(each[49], 1)} ms, p99 ${fmt(each[98], 1)} ms; restored byte-identical: ${restored}`);
    console.log(`ratio reset-all / create-all (same agent, same run): ${fmt(resetMs / totalMs, 2)}`);

    // Version 2: the operator copies a changed image in (written aside, renamed over the name).
    await images.reflink('_tpl_bench.img', '.incoming.img');
    const f2 = fs.openSync(path.join(disks, '.incoming.img'), 'r+');
    fs.writeSync(f2, Buffer.alloc(16 << 20, 0x77), 0, 16 << 20, 0);
    fs.fsyncSync(f2);
    fs.closeSync(f2);
    fs.renameSync(path.join(disks, '.incoming.img'), path.join(disks, '_tpl_bench.img'));
    const v2Ms = await versionTaken(2);
    t = performance.now();
    const rolled = await Promise.all(
      Array.from({ length: 100 }, (_, i) =>
        fetch(`${url}/luns/reset`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ iqn: `${BASE}:seat-${String(i).padStart(3, '0')}.ubuntu`, master: '_tpl_bench.img', version: 2 }),
        }).then(async (r) => ({ status: r.status, version: ((await r.json()) as { version?: number }).version })),
      ),
    );
    const rolloutMs = performance.now() - t;
    const f7 = fs.openSync(path.join(disks, 'seat-007.ubuntu.img'), 'r');
    fs.readSync(f7, head, 0, 64, 0);
    fs.closeSync(f7);
    console.log('\n== Version 2 of the master, rolled out to the 100 disks at once (each restored to version 2 by reflink) ==');
    console.log(`version 2 taken ${fmt(v2Ms)} ms after the drop (scan every 1 s, reflink snapshot, SHA-256 of 10 GiB)`);
    console.log(`rollout to 100 disks: ${fmt(rolloutMs)} ms; ${rolled.filter((r) => r.status === 200 && r.version === 2).length} x 200 on version 2; disk content is version 2: ${head.equals(Buffer.alloc(64, 0x77))}`);
    console.log(`one full (sparse) copy of the master, step 1: ${fmt(copyMs)} ms; rollout of 100 / one copy: ${fmt(rolloutMs / copyMs, 2)} (100 copies would take about ${fmt((copyMs * 100) / 1000, 1)} s and ${fmt((alloc100 * 100) / 2 ** 30, 1)} GiB)`);
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
