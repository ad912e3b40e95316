/**
 * npm run bench:transfer (root; needs btrfs-progs, tgt, e2fsprogs' filefrag):
 * A master version moved from one agent to another as the control plane's distribute asks it
 * (POST /masters/{name}/transfers on the receiver, which pulls from the sender's API with a
 * read ticket signed with the sender's token): a 40 GiB image holding 6 GiB of data (BENCH_TRANSFER_SIZE_GIB, BENCH_TRANSFER_DATA_GIB).
 * Printed: the bytes moved beside the image's size, the time to move them and to verify the
 * SHA-256, and, measured in the same run on the same filesystem, one local sparse copy (cp
 * --sparse=always, which finds the data by SEEK_DATA) as the baseline. Both agents are spawned
 * production processes (dist/src/storage-agent/main.js).
 */
import { ChildProcess, execFileSync, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { signTransferTicket } from '../src/shared/transfer-ticket';
import { fmt, mountBtrfs, tmp } from './lib';

const GiB = 2 ** 30;
const MiB = 2 ** 20;
const NAME = '_tpl_bench.img';
const SIZE = Number(process.env.BENCH_TRANSFER_SIZE_GIB ?? 40) * GiB;
const DATA = Number(process.env.BENCH_TRANSFER_DATA_GIB ?? 6) * GiB;

async function main() {
  const dir = tmp('kurrent-transfer-bench-');
  const mnt = mountBtrfs(dir, Math.max(4 * DATA + 8 * GiB, 16 * GiB));
  const procs: ChildProcess[] = [];
  try {
    const port = 5200 + (process.pid % 1000);
    const agents = ['a', 'b'].map((id, i) => {
      const disks = path.join(mnt, id);
      fs.mkdirSync(disks);
      // Version 1, the same small file on both: both agents hold the master.
      fs.writeFileSync(path.join(disks, NAME), Buffer.alloc(MiB, 1));
      const control = port + 100 + i;
      procs.push(spawn('tgtd', ['-f', '-C', String(control), '--iscsi', `portal=127.0.0.1:${control + 10000}`], { stdio: 'ignore' }));
      const env = {
        ...process.env,
        IPXE_AGENT_HOST: '127.0.0.1',
        IPXE_AGENT_PORT: String(port + i),
        IPXE_AGENT_TOKEN: `bench-token-${id}`,
        IPXE_AGENT_BACKEND: 'stgt',
        IPXE_AGENT_TGT_CONTROL_PORT: String(control),
        DISK_DIR: disks,
        IPXE_AGENT_STATE_DIR: path.join(dir, `state-${id}`),
        IPXE_AGENT_LOG_LEVEL: 'warn',
        IPXE_AGENT_MASTER_SCAN_SECONDS: '1',
        IPXE_AGENT_MASTER_SETTLE_SECONDS: '0',
      };
      return { id, disks, url: `http://127.0.0.1:${port + i}`, token: `bench-token-${id}`, env };
    });
    await new Promise((r) => setTimeout(r, 500));
    for (const a of agents) {
      const p = spawn(process.execPath, [path.join(__dirname, '../src/storage-agent/main.js')], { env: a.env, stdio: ['ignore', 'ignore', 'inherit'] });
      procs.push(p);
    }
    const get = async <T>(a: (typeof agents)[number], p: string): Promise<T> => {
      try {
        return (await (await fetch(a.url + p, { headers: { authorization: `Bearer ${a.token}` } })).json()) as T;
      } catch (e) {
        throw new Error(`GET ${a.id} ${p}: ${(e as Error).message} (${String((e as { cause?: unknown }).cause)})`);
      }
    };
    const latest = async (a: (typeof agents)[number]) => {
      try {
        return (await get<{ name: string; latest: number | null }[]>(a, '/masters')).find((m) => m.name === NAME)?.latest ?? null;
      } catch {
        return null;
      }
    };
    const until = async (fn: () => Promise<boolean>) => {
      while (!(await fn())) await new Promise((r) => setTimeout(r, 100));
    };
    await until(async () => (await latest(agents[0])) === 1 && (await latest(agents[1])) === 1);

    // Version 2 on the sender only: SIZE bytes, DATA of them data in 64 MiB runs spread evenly.
    const [a, b] = agents;
    const aside = path.join(a.disks, '.incoming');
    const fd = fs.openSync(aside, 'w');
    fs.ftruncateSync(fd, SIZE);
    const runs = Math.round(DATA / (64 * MiB));
    const chunk = randomBytes(16 * MiB);
    for (let r = 0; r < runs; r++) {
      const at = Math.floor((r * (SIZE - 64 * MiB)) / Math.max(1, runs - 1) / MiB) * MiB;
      for (let k = 0; k < 4; k++) {
        chunk.writeUInt32LE(r * 4 + k, 0); // no two runs alike
        fs.writeSync(fd, chunk, 0, chunk.length, at + k * 16 * MiB);
      }
    }
    fs.fsyncSync(fd);
    fs.closeSync(fd);
    fs.renameSync(aside, path.join(a.disks, NAME));
    let t = performance.now();
    await until(async () => (await latest(a)) === 2);
    const takeMs = performance.now() - t;
    const v2 = path.join(a.disks, '.masters', NAME, '2.img');
    const allocated = fs.statSync(v2).blocks * 512;

    // The baseline: one local sparse copy of the same version on the same filesystem.
    t = performance.now();
    execFileSync('cp', ['--sparse=always', '--reflink=never', v2, path.join(mnt, 'baseline.img')]);
    execFileSync('sync', ['-f', path.join(mnt, 'baseline.img')]);
    const copyMs = performance.now() - t;
    fs.rmSync(path.join(mnt, 'baseline.img'));

    // The transfer, as the control plane's distribute asks it of the receiver.
    t = performance.now();
    const res = await fetch(`${b.url}/masters/${NAME}/transfers`, {
      method: 'POST',
      headers: { authorization: `Bearer ${b.token}`, 'content-type': 'application/json' },
      body: JSON.stringify({ version: 2, source_url: a.url, source_ticket: signTransferTicket(a.token, NAME, 2, Math.floor(Date.now() / 1000) + 3600) }),
    });
    if (res.status !== 202) throw new Error(`transfer refused: ${res.status} ${await res.text()}`);
    type T = { version: number; state: string; data_bytes: number; bytes_done: number; moved_bytes: number; error: string | null };
    let moved = 0;
    let movedMs = 0;
    for (;;) {
      const x = (await get<T[]>(b, '/masters/transfers')).find((y) => y.version === 2)!;
      if (!movedMs && x.bytes_done === x.data_bytes) {
        movedMs = performance.now() - t;
        moved = x.moved_bytes;
      }
      if (x.state !== 'running') {
        if (x.state !== 'done') throw new Error(`transfer ${x.state}: ${x.error}`);
        moved = x.moved_bytes;
        break;
      }
      await new Promise((r) => setTimeout(r, 100));
    }
    const totalMs = performance.now() - t;
    const received = path.join(b.disks, '.masters', NAME, '2.img');
    type M = { name: string; versions: { version: number; sha256: string; origin: string }[] }[];
    const shaOf = async (x: (typeof agents)[number]) => (await get<M>(x, '/masters')).find((m) => m.name === NAME)!.versions.find((v) => v.version === 2)!;
    const [sa, sb] = [await shaOf(a), await shaOf(b)];
    const same = sa.sha256 === sb.sha256 && sb.origin === 'transfer';

    console.log(`== A version moved between two agents: ${fmt(SIZE / GiB)} GiB image, ${fmt(allocated / GiB, 2)} GiB of data (btrfs loop mount, both agents spawned) ==`);
    console.log(`version 2 taken on the sender     : ${fmt(takeMs)} ms after the drop (reflink snapshot + SHA-256 of ${fmt(SIZE / GiB)} GiB)`);
    console.log(`bytes moved                       : ${fmt(moved / GiB, 2)} GiB of ${fmt(SIZE / GiB)} GiB (${fmt((moved / SIZE) * 100, 1)}% of the size; data ranges only)`);
    console.log(`moving the data                   : ${fmt(movedMs)} ms (${fmt(moved / MiB / (movedMs / 1000))} MiB/s; 16 MiB requests, one ahead; synced and checkpointed every 64 MiB)`);
    console.log(`verifying (SHA-256) and adopting  : ${fmt(totalMs - movedMs)} ms`);
    console.log(`transfer total                    : ${fmt(totalMs)} ms; same SHA-256 on both (the receiver's own check): ${same}; received allocation ${fmt((fs.statSync(received).blocks * 512) / GiB, 2)} GiB`);
    console.log(`baseline, one local sparse copy   : ${fmt(copyMs)} ms (cp --sparse=always, same filesystem)`);
    console.log(`ratio moving / local copy         : ${fmt(movedMs / copyMs, 2)}; transfer total / local copy: ${fmt(totalMs / copyMs, 2)}`);
  } finally {
    for (const p of procs) p.kill('SIGKILL');
    await new Promise((r) => setTimeout(r, 500));
    execFileSync('umount', ['-l', mnt]);
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
