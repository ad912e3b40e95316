/**
 * npm run bench:disks (root; needs tgt):
 *  1. POST /workers/luns/disk/batch: 100 disks from a master across 2 stgt agents (real agent
 *     processes, one real tgtd each), total time.
 *  2. GET /agents?live=true with one agent black-holed (accepts, never answers): elapsed time vs
 *     the per-agent probe timeout.
 */
import { ChildProcess, execFileSync, spawn } from 'node:child_process';
import * as fs from 'node:fs';
import * as net from 'node:net';
import * as path from 'node:path';
import { fmt, get, startProcess, stop, tmp } from './lib';

const TOKEN = 'bench';
const PROBE_TIMEOUT = 1000;

async function post(url: string, body: unknown): Promise<{ status: number; body: any }> {
  const r = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json', authorization: `Bearer ${TOKEN}` }, body: JSON.stringify(body) });
  return { status: r.status, body: await r.json() };
}

async function main() {
  const dir = tmp('kurrent-disks-bench-');
  const dist = path.resolve(__dirname, '..');
  const procs: ChildProcess[] = [];
  const hole = net.createServer(() => undefined); // black hole: accepts, never answers
  try {
    const agents: { id: string; port: number }[] = [];
    for (const [i, id] of ['st1', 'st2'].entries()) {
      const control = 6100 + i;
      const tgtd = spawn('tgtd', ['-f', '-C', String(control), '--iscsi', `portal=127.0.0.1:${16100 + i}`], { stdio: 'ignore' });
      procs.push(tgtd);
      const images = path.join(dir, id, 'images');
      fs.mkdirSync(images, { recursive: true });
      const fd = fs.openSync(path.join(images, '_tpl_ubuntu.img'), 'w');
      fs.ftruncateSync(fd, 2 ** 30);
      fs.writeSync(fd, Buffer.alloc(1 << 20, 1), 0, 1 << 20, 0);
      fs.closeSync(fd);
      await new Promise((r) => setTimeout(r, 300));
      const port = 6200 + i;
      const a = await startProcess(
        path.join(dist, 'src/storage-agent/main.js'),
        { IPXE_AGENT_PORT: String(port), IPXE_AGENT_HOST: '127.0.0.1', IPXE_AGENT_BACKEND: 'stgt', IPXE_AGENT_TGT_CONTROL_PORT: String(control), DISK_DIR: images, IPXE_AGENT_STATE_DIR: path.join(dir, id, 'state'), IPXE_AGENT_LOG_LEVEL: 'warn' },
        `http://127.0.0.1:${port}/healthz`,
      );
      procs.push(a.proc);
      agents.push({ id, port });
    }
    await new Promise<void>((r) => hole.listen(6299, '127.0.0.1', r));
    const cp = await startProcess(
      path.join(dist, 'src/control-plane/main.js'),
      {
        IPXE_CP_PORT: '6300',
        IPXE_CP_HOST: '127.0.0.1',
        IPXE_CP_TOKEN: TOKEN,
        IPXE_CP_CONFIG_DIR: path.join(dir, 'cp/config'),
        IPXE_CP_STATE_DIR: path.join(dir, 'cp/state'),
        IPXE_CP_DNSMASQ_DIR: path.join(dir, 'cp/dnsmasq'),
        IPXE_CP_LOG_LEVEL: 'warn',
        IPXE_CP_AGENT_PROBE_TIMEOUT_MS: String(PROBE_TIMEOUT),
      },
      'http://127.0.0.1:6300/healthz',
    );
    procs.push(cp.proc);
    const cpUrl = 'http://127.0.0.1:6300';
    for (const a of agents) await post(`${cpUrl}/agents`, { id: a.id, base_url: `http://127.0.0.1:${a.port}`, role: { disk: true }, tags: ['storage', 'stgt'] });
    await post(`${cpUrl}/workers/batch`, { count: 100, name_prefix: 'seat-' });
    const targets = Array.from({ length: 100 }, (_, i) => ({ worker_id: `seat-${String(i + 1).padStart(3, '0')}`, agent: agents[i % 2].id }));
    const t0 = performance.now();
    const r = await post(`${cpUrl}/workers/luns/disk/batch`, { type: 'master', os: 'ubuntu', name: '_tpl_ubuntu.img', targets });
    const ms = performance.now() - t0;
    const counts = agents.map((a, i) => {
      const out = execFileSync('tgtadm', ['-C', String(6100 + i), '--lld', 'iscsi', '--mode', 'target', '--op', 'show'], { encoding: 'utf8' });
      return `${a.id}: ${out.match(/^Target \d+:/gm)?.length ?? 0} targets`;
    });
    console.log('== Batch create: 100 disks from a master across 2 stgt agents (ext4/tmp: sparse-copy clones) ==');
    console.log(`total ${fmt(ms)} ms (target < 10,000 ms): ${r.body.succeeded?.length} succeeded, ${r.body.skipped?.length} skipped, ${r.body.failed?.length} failed; ${counts.join(', ')}`);

    await post(`${cpUrl}/agents`, { id: 'blackhole', base_url: 'http://127.0.0.1:6299', role: { disk: true } });
    const times: number[] = [];
    for (let i = 0; i < 5; i++) {
      const t1 = performance.now();
      const live = await get(`${cpUrl}/agents?live=true`, { token: TOKEN });
      times.push(performance.now() - t1);
      const health = (JSON.parse(live.body) as { id: string; health: string }[]).map((a) => `${a.id}=${a.health}`).join(' ');
      if (i === 0) console.log(`\n== GET /agents?live=true with one agent black-holed (probe timeout ${PROBE_TIMEOUT} ms) ==\n${health}`);
    }
    times.sort((a, b) => a - b);
    console.log(`5 calls: median ${fmt(times[2])} ms, max ${fmt(times[4])} ms (target <= ${PROBE_TIMEOUT + 200} ms)`);
  } finally {
    for (const p of procs.reverse()) await (p.spawnfile === 'tgtd' ? new Promise((r) => { p.once('exit', r); p.kill('SIGKILL'); }) : stop(p));
    hole.close();
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
