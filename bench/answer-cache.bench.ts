/**
 * `npm run bench:answer-cache`: the boot-answer cache hit rate of two control planes on one
 * PostgreSQL behind a round-robin balancer, during a boot storm. Each boot is what boot.ipxe.cfg
 * does: /devices/report (telemetry, written by whichever control plane got it), then /boot-vars
 * and /boot-menu; consecutive requests go to alternate control planes, as HAProxy's roundrobin
 * sends them (a fleet rebooting, again and again). Three passes fill the caches, the fourth is measured. Figures read from each process's /metrics (kurrent_boot_answer_cache_total).
 */
import * as path from 'node:path';
import { exportStore, importStore } from '../scripts/store';
import { startPostgres } from '../scripts/pg-cluster';
import { fmt, get, macOf, prodCommand, seedLedger, startProcess, stop, tmp, workerOf } from './lib';

const N = Number(process.env.BENCH_DEVICES ?? 2_000);
const CONCURRENCY = 32;
const PORTS = [4971, 4972];
const root = path.resolve(__dirname, '..', '..');

async function cacheCounts(port: number): Promise<{ hit: number; miss: number }> {
  const text = (await get(`http://127.0.0.1:${port}/metrics`)).body;
  const v = (r: string) => Number(new RegExp(`^kurrent_boot_answer_cache_total\\{result="${r}"\\} (\\d+)$`, 'm').exec(text)?.[1] ?? NaN);
  return { hit: v('hit'), miss: v('miss') };
}

async function main() {
  const dir = tmp('kurrent-bench-cache-');
  await seedLedger(dir, N);
  const fileEnv = { IPXE_CP_STATE_DIR: path.join(dir, 'state'), IPXE_CP_CONFIG_DIR: path.join(dir, 'config'), IPXE_CP_DNSMASQ_DIR: path.join(dir, 'dnsmasq'), IPXE_CP_LOG_LEVEL: 'warn' };
  const pg = await startPostgres();
  const procs: Awaited<ReturnType<typeof startProcess>>[] = [];
  try {
    const url = pg.createDb('bench');
    const base = { ...fileEnv, IPXE_CP_HOST: '127.0.0.1', IPXE_CP_STORE: 'postgres', IPXE_CP_DATABASE_URL: url, IPXE_CP_METRICS_PUBLIC: 'true' };
    await importStore(base, await exportStore(fileEnv));
    const prod = prodCommand(root);
    for (const [i, port] of PORTS.entries()) {
      const env = { ...base, IPXE_CP_PORT: String(port), IPXE_CP_NODE_ID: `bench-${i}`, IPXE_CP_STATE_DIR: path.join(dir, `state-${i}`), IPXE_CP_DNSMASQ_DIR: path.join(dir, `dnsmasq-${i}`) };
      procs.push(await startProcess(prod.script, env, `http://127.0.0.1:${port}/healthz`, prod));
    }
    let next = 0;
    const rr = () => PORTS[next++ % PORTS.length];
    const boot = async (i: number) => {
      const q = `mac=${macOf(i)}&hostname=${workerOf(i)}`;
      await get(`http://127.0.0.1:${rr()}/devices/report?mac=${macOf(i)}&serial=SN${i}`);
      const vars = await get(`http://127.0.0.1:${rr()}/boot-vars?${q}`);
      if (!vars.body.includes(`boot vars for ${workerOf(i)}`)) throw new Error(`unexpected answer for ${workerOf(i)}: ${vars.body}`);
      await get(`http://127.0.0.1:${rr()}/boot-menu?${q}`);
    };
    const storm = async () => {
      let k = 0;
      const t0 = performance.now();
      await Promise.all(
        Array.from({ length: CONCURRENCY }, async () => {
          for (let i = k++; i < N; i = k++) await boot(i);
        }),
      );
      return performance.now() - t0;
    };
    // Which control plane answers which route of a boot depends on the interleaving: a few passes
    // give both of them every answer once (a cache that forgot nothing would then hit every time).
    for (let pass = 0; pass < 3; pass++) await storm();
    const before = await Promise.all(PORTS.map(cacheCounts));
    const ms = await storm();
    const after = await Promise.all(PORTS.map(cacheCounts));
    let hits = 0;
    let misses = 0;
    PORTS.forEach((port, i) => {
      const h = after[i].hit - before[i].hit;
      const m = after[i].miss - before[i].miss;
      hits += h;
      misses += m;
      console.log(`control plane ${i + 1} (:${port}): ${fmt(h)} hits, ${fmt(m)} misses (${fmt((100 * h) / Math.max(1, h + m), 1)} %)`);
    });
    console.log(`fourth storm of ${fmt(N)} boots through two control planes: answer cache hit rate ${fmt((100 * hits) / Math.max(1, hits + misses), 1)} % (${fmt(hits + misses)} boot answers, ${fmt(ms)} ms)`);
  } finally {
    for (const p of procs) await stop(p.proc);
    pg.stop();
  }
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
