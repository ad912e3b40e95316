/**
 * `npm run bench:memory`: what unauthenticated floods cost a production control plane, measured
 * from outside (the process's RSS from /proc, never a heap figure inside a test). The control
 * plane runs exactly as `npm run start:prod` starts it, with a ledger of BENCH_DEVICES devices;
 * each flood sends BENCH_FLOOD requests of each kind over keep-alive sockets:
 *   - /devices/challenge for distinct unknown MACs (nothing may be stored for them),
 *   - /devices/report with a bad key for distinct unknown MACs (auto-register off: refused),
 *   - /boot-vars for distinct unknown MACs (the answer cache may hold at most its cap).
 * RSS after each of BENCH_FLOODS (4) identical floods (other MACs each time): a bounded process
 * settles, so the last flood's growth is small against the first's. Printed as figures and a
 * ratio, not judged here.
 */
import * as fs from 'node:fs';
import * as http from 'node:http';
import * as path from 'node:path';
import { fmt, macOf, prodCommand, seedLedger, startProcess, stop, tmp } from './lib';

const N = Number(process.env.BENCH_DEVICES ?? 10_000);
const FLOOD = Number(process.env.BENCH_FLOOD ?? 100_000);
const FLOODS = Number(process.env.BENCH_FLOODS ?? 4);
const CONCURRENCY = 32;
const PORT = 4981;
const root = path.resolve(__dirname, '..', '..');

const rssOf = (pid: number) => Number(/^VmRSS:\s+(\d+) kB$/m.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'))![1]) * 1024;

async function flood(offset: number): Promise<void> {
  const agent = new http.Agent({ keepAlive: true, maxSockets: CONCURRENCY });
  const kinds = [(mac: string) => `/devices/challenge?mac=${mac}&format=json`, (mac: string) => `/devices/report?mac=${mac}&pubkey=zz`, (mac: string) => `/boot-vars?mac=${mac}`];
  let next = 0;
  const total = FLOOD * kinds.length;
  await Promise.all(
    Array.from({ length: CONCURRENCY }, async () => {
      for (let i = next++; i < total; i = next++) {
        const mac = macOf(0x40000000 + offset + Math.floor(i / kinds.length));
        await new Promise<void>((resolve, reject) => {
          http
            .get({ host: '127.0.0.1', port: PORT, path: kinds[i % kinds.length](mac), agent }, (res) => {
              res.resume();
              res.on('end', resolve);
            })
            .on('error', reject);
        });
      }
    }),
  );
  agent.destroy();
}

async function main() {
  const dir = tmp('kurrent-bench-mem-');
  await seedLedger(dir, N);
  const env = {
    IPXE_CP_PORT: String(PORT),
    IPXE_CP_HOST: '127.0.0.1',
    IPXE_CP_CONFIG_DIR: path.join(dir, 'config'),
    IPXE_CP_STATE_DIR: path.join(dir, 'state'),
    IPXE_CP_DNSMASQ_DIR: path.join(dir, 'dnsmasq'),
    IPXE_CP_LOG_LEVEL: 'warn',
    IPXE_CP_AUTO_REGISTER: 'false',
  };
  const prod = prodCommand(root);
  const p = await startProcess(prod.script, env, `http://127.0.0.1:${PORT}/healthz`, prod);
  try {
    await new Promise((r) => setTimeout(r, 2000)); // the code cache is written 3 s after start; let start-up settle
    const rss = [rssOf(p.proc.pid!)];
    const t0 = performance.now();
    for (let k = 0; k < FLOODS; k++) {
      await flood(k * FLOOD); // the same kinds of requests, other MACs each time
      rss.push(rssOf(p.proc.pid!));
    }
    const ms = (performance.now() - t0) / FLOODS;
    const mb = (b: number) => fmt(b / 1048576, 1);
    const growth = rss.slice(1).map((r, k) => r - rss[k]);
    console.log(`ledger ${fmt(N)} devices; each flood: ${fmt(FLOOD)} challenges + ${fmt(FLOOD)} bad-key reports + ${fmt(FLOOD)} boot-vars of unknown MACs (${fmt(ms)} ms each)`);
    console.log(`RSS after start ${mb(rss[0])} MB, then after each flood: ${rss.slice(1).map(mb).join(', ')} MB (growth ${growth.map((g) => `${g >= 0 ? '+' : ''}${mb(g)}`).join(', ')})`);
    console.log(`growth in the last flood / growth in the first: ${fmt(growth[growth.length - 1] / Math.max(1, growth[0]), 2)} (a bounded process settles: well below 1)`);
  } finally {
    await stop(p.proc);
  }
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
